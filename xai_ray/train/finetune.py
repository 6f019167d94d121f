"""``xai-ray finetune``: fine-tune an encoder into a negative/positive classifier on Ray Train.

The driver reads the corpus, checks its labels, splits off a stratified held-out slice (recorded by
doc id), tokenizes once (long texts keep their start and their end: ``truncation=head_tail``) and
hands the token ids to a ``TorchTrainer`` (``xai_ray.train.loop`` is the worker loop: data-parallel
over ``workers``, bf16 autocast on GPU, AdamW with linear warmup/decay, gradient clipping). Checkpoints go to ``OUT/_checkpoints``; running the same command again after an
interruption resumes from the latest one (Ray Train V2 restores a run from its ``RunConfig(name,
storage_path)``). At the end ``OUT`` is a Hugging Face model folder (safetensors, tokenizer,
id2label) that ``xai-ray run --model OUT`` loads, plus ``metrics.json`` and ``heldout_ids.txt``.

Over 300 lines: the driver's whole job in order (storage and resume check, the Ray Train fit,
the model and metrics written); its settings, examples and batches live in their own modules.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from xai_ray.scoring.segments import INPUT_FILE
from xai_ray.train.examples import (
    LABELS,
    FinetuneError,
    encode,
    fingerprint_rows,
    label_counts,
    labelled_rows,
    split_rows,
)
from xai_ray.train.settings import RESUMABLE_CHANGES, FinetuneConfig

log = logging.getLogger("xai_ray")
CHECKPOINTS = "_checkpoints"
RUN_NAME = "finetune"


@dataclass
class FinetuneResult:
    out: Path
    metrics: dict


def run_finetune(cfg: FinetuneConfig) -> FinetuneResult:
    """Fine-tune ``cfg.base`` on ``cfg.data`` with Ray Train and write the model folder ``cfg.out``."""
    started = time.perf_counter()
    from xai_ray.model.loading import read_model_config

    path, model_config = read_model_config(cfg.base, cfg.allow_pickle, cfg.trust_remote_code)
    if Path(path).expanduser().is_dir():  # a folder named from here: the Ray Train workers start elsewhere
        path = str(Path(path).expanduser().resolve())
    out = Path(cfg.out).expanduser().resolve()
    _check_out(out, Path(path))
    positions = getattr(model_config, "max_position_embeddings", None)
    if positions and cfg.max_length > positions:
        raise FinetuneError(f"max_length {cfg.max_length} exceeds the {positions} positions of {cfg.base!r}")
    tokenizer = _tokenizer(cfg.base, path, cfg.trust_remote_code)
    train, heldout = split_rows(labelled_rows(cfg), cfg.eval_fraction, cfg.seed)
    data_fingerprint = fingerprint_rows(pd.concat([train, heldout]))
    ids = encode(tokenizer, list(train.text) + list(heldout.text), cfg.max_length, cfg.truncation)
    prepared_s = time.perf_counter() - started
    log.info(
        "fine-tuning %s on %d reviews, %d held out (data sha256 %s...)",
        cfg.base,
        len(train),
        len(heldout),
        data_fingerprint[:12],
    )

    out.mkdir(parents=True, exist_ok=True)
    storage = out / CHECKPOINTS
    job = {
        "config": {k: v for k, v in cfg.to_dict().items() if k not in RESUMABLE_CHANGES},
        "data_fingerprint": data_fingerprint,
    }
    job_key = hashlib.sha256(json.dumps(job, sort_keys=True, default=str).encode()).hexdigest()
    _prepare_storage(storage, job, job_key, cfg.resume)

    from xai_ray.progress import is_quiet, native_stderr_into, route_noise
    from xai_ray.runtime import ensure_ray

    # Ray's and the libraries' chatter into OUT/finetune.log, as a run's goes into its log
    with native_stderr_into(route_noise(out / "finetune.log")):
        ensure_ray(log_to_driver=not is_quiet())  # the workers print the training's progress and ETA (not under -q)
    scaling = plan_scaling(cfg)
    loop_config = {
        "model_path": path,
        "allow_pickle": cfg.allow_pickle,
        "trust_remote_code": cfg.trust_remote_code,
        "job_key": job_key,
        "seed": cfg.seed,
        "epochs": cfg.epochs,
        "batch_size": cfg.batch_size,
        "lr": cfg.lr,
        "weight_decay": cfg.weight_decay,
        "warmup_ratio": cfg.warmup_ratio,
        "max_grad_norm": cfg.max_grad_norm,
        "head_lr_scale": cfg.head_lr_scale,
        "eval_batch_size": cfg.eval_batch_size,
        "log_every": cfg.log_every,
        "checkpoint_every": cfg.checkpoint_every,
        "fail_after_epoch": cfg.fail_after_epoch,
        "pad_id": tokenizer.pad_token_id or 0,
        "threads": scaling["threads"],
        "bf16": scaling["bf16"],
        "train_ids": ids[: len(train)],
        "train_labels": train.label.to_numpy(dtype=np.int64),
        "eval_ids": ids[len(train) :],
        "eval_labels": heldout.label.to_numpy(dtype=np.int64),
    }
    result = _fit(loop_config, scaling, storage, cfg.max_failures)
    train_s = time.perf_counter() - started - prepared_s

    progress = _write_model(result.checkpoint, out, tokenizer)
    metrics = _metrics(
        cfg,
        path,
        model_config,
        train,
        heldout,
        data_fingerprint,
        progress,
        scaling,
        {"prepare_s": prepared_s, "train_s": train_s, "started": started},
    )
    (out / "heldout_ids.txt").write_text("".join(f"{doc_id}\n" for doc_id in heldout.doc_id))
    # what the model learned from: `xai-ray run` (long_text=auto) cuts long reviews the same way
    (out / INPUT_FILE).write_text(json.dumps({"truncation": cfg.truncation, "max_length": cfg.max_length}) + "\n")
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1, default=str))
    if not cfg.keep_checkpoints:
        shutil.rmtree(storage, ignore_errors=True)
    log.info(
        "fine-tuned model -> %s (held-out accuracy %.4f, %.1f min)",
        out,
        metrics["heldout_accuracy"],
        metrics["timings"]["total_s"] / 60,
    )
    return FinetuneResult(out=out, metrics=metrics)


def plan_scaling(cfg: FinetuneConfig) -> dict:
    """Workers, CPUs/GPUs per worker, threads and bf16 from the config and the Ray cluster."""
    import ray

    resources = ray.cluster_resources()
    gpus = cfg.gpus_per_worker if cfg.gpus_per_worker is not None else (1.0 if resources.get("GPU", 0) >= 1 else 0.0)
    cpus_total = max(1, int(resources.get("CPU", 1)))
    if gpus > 0:
        workers = cfg.workers or max(1, int(resources.get("GPU", 1) // gpus))
    else:
        workers = cfg.workers or max(1, int(cpus_total // (cfg.cpus_per_worker or 1)))
    cpus = cfg.cpus_per_worker or max(1, cpus_total // workers)
    return {
        "workers": workers,
        "gpus_per_worker": gpus,
        "cpus_per_worker": cpus,
        "use_gpu": gpus > 0,
        "threads": max(1, int(cpus)),
        "bf16": gpus > 0 if cfg.bf16 is None else bool(cfg.bf16),
    }


def _fit(loop_config: dict, scaling: dict, storage: Path, max_failures: int):
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from xai_ray.train.loop import train_loop

    resources = {"CPU": scaling["cpus_per_worker"]}
    if scaling["use_gpu"]:
        resources["GPU"] = scaling["gpus_per_worker"]
    trainer = _trainer_class(TorchTrainer)(
        train_loop,
        train_loop_config=loop_config,
        scaling_config=ScalingConfig(
            num_workers=scaling["workers"], use_gpu=scaling["use_gpu"], resources_per_worker=resources
        ),
        run_config=RunConfig(
            name=RUN_NAME,
            storage_path=str(storage),
            failure_config=FailureConfig(max_failures=max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=1),
        ),
    )
    log.info(
        "Ray Train: %d worker(s), %s CPU + %s GPU each, %d thread(s), bf16 %s",
        scaling["workers"],
        scaling["cpus_per_worker"],
        scaling["gpus_per_worker"],
        scaling["threads"],
        scaling["bf16"],
    )
    try:
        result = trainer.fit()
    except Exception:
        log.error("fine-tuning failed; its checkpoints stay in %s: run the same command again to resume", storage)
        raise
    if result.checkpoint is None:
        raise RuntimeError("training finished without a checkpoint")
    return result


def _trainer_class(base):
    """``TorchTrainer`` minus the placement-group cleaner when the cluster has no dashboard.

    The cleaner watches the controller through the state API, which lives in the dashboard: without
    one (``include_dashboard=False``) it warns every second and never exits.
    """
    try:
        from ray._private.worker import get_dashboard_url

        if get_dashboard_url():
            return base
    except Exception:
        return base

    class Trainer(base):
        def _create_default_callbacks(self):
            return [
                c for c in super()._create_default_callbacks() if type(c).__name__ != "PlacementGroupCleanerCallback"
            ]

    return Trainer


def _prepare_storage(storage: Path, job: dict, job_key: str, resume: bool) -> None:
    marker = storage / "job.json"
    if storage.exists() and not resume:
        log.info("resume=false: removing the checkpoints of an earlier run in %s", storage)
        shutil.rmtree(storage)
    elif marker.is_file():
        previous = json.loads(marker.read_text())
        if previous.get("job_key") != job_key:
            changed = sorted(
                k
                for k in set(job["config"]) | set(previous.get("config", {}))
                if job["config"].get(k) != previous.get("config", {}).get(k)
            )
            if previous.get("data_fingerprint") != job["data_fingerprint"]:
                changed.append("data")
            raise FinetuneError(
                f"{storage.parent} holds an unfinished fine-tune of a different job (changed: "
                f"{', '.join(changed) or 'unknown'}); use another --out or --set resume=false"
            )
        log.info("resuming the unfinished fine-tune in %s", storage)
    storage.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps({**job, "job_key": job_key}, indent=1, default=str))


def _tokenizer(name: str, path: str, trust_remote_code: bool):
    from transformers import AutoTokenizer

    from xai_ray.model.loading import text_only

    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    except Exception as err:
        raise FinetuneError(f"base model {name!r} has no loadable tokenizer ({type(err).__name__})") from None
    if not getattr(tokenizer, "is_fast", False):
        raise FinetuneError(f"base model {name!r} has no fast tokenizer; the explanations need word ids")
    return text_only(tokenizer)  # trained on reviews read as the scorer reads them


def _check_out(out: Path, base: Path) -> None:
    """Refuse an ``--out`` whose model files this job would overwrite: the base model's own folder,
    or a folder holding a model no fine-tune wrote (a fine-tune's folder, which holds its
    ``INPUT_FILE`` or checkpoints, is written again or resumed)."""
    if base.is_dir() and out == base.resolve():
        raise FinetuneError(f"--out {str(out)!r} is the base model's folder: its weights would be overwritten")
    if out.exists() and not out.is_dir():  # refused here, not after the data is read and tokenized
        raise FinetuneError(f"--out {str(out)!r} is a file, not a folder; give a new or empty folder")
    # what only a fine-tune writes: its input record or its checkpoints (a metrics.json alone, a
    # common name, was taken for one, and a user's folder was written over)
    ours = (out / INPUT_FILE).is_file() or (out / CHECKPOINTS).is_dir()
    if (out / "config.json").is_file() and not ours:
        raise FinetuneError(
            f"--out {str(out)!r} holds a model this job did not write (its config.json); give a new or empty folder"
        )
    # a store, or any folder of the user's: the model's files (tokenizer.json, config.json...) would
    # land among them, over same-named ones
    if out.is_dir() and not ours and any(out.iterdir()):
        kind = "an xai-ray store" if (out / "runs").is_dir() or (out / "_staging").is_dir() else "a folder that"
        held = "" if kind.startswith("an") else " holds files this job did not write"
        raise FinetuneError(f"--out {str(out)!r} is {kind}{held}; give a new or empty folder")


def _write_model(checkpoint, out: Path, tokenizer) -> dict:
    """Copy the final checkpoint's weights + config into ``out`` and save the tokenizer there."""
    from xai_ray.train.loop import model_files

    with checkpoint.as_directory() as folder:
        progress = json.loads((Path(folder) / "progress.json").read_text())
        for file in model_files(folder):
            shutil.copy2(file, out / file.name)
    tokenizer.save_pretrained(out)
    return progress


def _metrics(cfg, path, model_config, train, heldout, data_fingerprint, progress, scaling, times) -> dict:
    from xai_ray.runtime import versions

    final = progress["epochs"][-1]
    majority = float(heldout.label.value_counts(normalize=True).max())
    docs = len(train) * cfg.epochs
    return {
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "heldout_accuracy": final["eval_accuracy"],
        "heldout_loss": final["eval_loss"],
        "majority_baseline": round(majority, 5),
        "base": {"name": cfg.base, "path": path, "model_type": model_config.model_type},
        "model_fingerprint": progress.get("model_fingerprint"),
        "labels": LABELS,
        "data": {
            "source": cfg.data,
            "split": cfg.split,
            "fingerprint": data_fingerprint,
            "train_docs": len(train),
            "heldout_docs": len(heldout),
            "train_label_counts": label_counts(train),
            "heldout_label_counts": label_counts(heldout),
        },
        "epochs": progress["epochs"],
        "loss_curve": progress["curve"],
        "starts": progress["starts"],
        "config": cfg.to_dict(),
        "scaling": scaling,
        "timings": {
            "prepare_s": round(times["prepare_s"], 2),
            "fit_s": round(times["train_s"], 2),
            "train_loop_s": round(progress["train_seconds"], 2),
            "train_docs_per_s": round(docs / max(progress["train_seconds"], 1e-9), 2),
            "total_s": round(time.perf_counter() - times["started"], 2),
        },
        "versions": versions(),
        "host": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()},
        "heldout_ids": heldout.doc_id.tolist(),
    }
