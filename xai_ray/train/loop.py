"""The Ray Train worker loop of ``xai-ray finetune`` (one copy per worker; see ``xai_ray.train.finetune``).

Every worker builds the same seeded plan of length-bucketed global batches for an epoch and takes
its own slice (``rows[rank::world]``) of each, so all workers run the same number of steps and
DDP averages their gradients. A checkpoint (Hugging Face weights + optimizer/scheduler state +
``progress.json``) is reported at every epoch end (and every ``checkpoint_every`` steps); a worker
that starts with ``ray.train.get_checkpoint()`` set continues from it at the same batch, with the
same schedule and the loss curve so far.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from contextlib import nullcontext
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from xai_ray.model.batching import token_budget_batches
from xai_ray.progress import eta, format_seconds
from xai_ray.train.batches import collate, linear_schedule, plan_batches

MODEL_FILES_SKIP = ("train_state.pt", "progress.json")


def train_loop(config: dict) -> None:
    """``train_loop_per_worker`` of the TorchTrainer."""
    import ray.train
    import ray.train.torch
    import torch
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    from xai_ray.model.loading import fingerprint

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    if config["threads"]:
        torch.set_num_threads(int(config["threads"]))
    device = ray.train.torch.get_device()
    if isinstance(device, list):
        device = device[0]
    autocast = (
        torch.autocast(device.type, dtype=torch.bfloat16)
        if config["bf16"] and device.type in ("cuda", "cpu")
        else nullcontext()
    )

    progress = {
        "epoch": 0,
        "batch": 0,
        "step": 0,
        "epoch_loss": 0.0,
        "epoch_rows": 0,
        "train_seconds": 0.0,
        "curve": [],
        "epochs": [],
        "starts": [],
        "job": config["job_key"],
    }
    source, state = config["model_path"], None
    checkpoint = ray.train.get_checkpoint()
    torch.manual_seed(config["seed"])  # a fresh classifier head is initialised the same way every run
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            progress = json.loads((Path(folder) / "progress.json").read_text())
            state = torch.load(Path(folder) / "train_state.pt", map_location="cpu", weights_only=True)
            model = _load(AutoModelForSequenceClassification, folder, config, pickle_ok=False)
        if progress.get("job") != config["job_key"]:
            raise RuntimeError("the checkpoint belongs to a different fine-tune job")
    else:
        model = _load(AutoModelForSequenceClassification, source, config, pickle_ok=config["allow_pickle"])
    resumed = checkpoint is not None
    progress["starts"].append(
        {
            "epoch": progress["epoch"] + 1,
            "batch": progress["batch"],
            "step": progress["step"],
            "workers": world,
            "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
    )

    model = ray.train.torch.prepare_model(model)
    core = getattr(model, "module", model)
    groups: dict[tuple[bool, bool], list] = {}
    for name, param in core.named_parameters():
        if param.requires_grad:
            groups.setdefault((_is_head(name), _no_decay(name)), []).append(param)
    optimizer = torch.optim.AdamW(
        [
            {
                "params": params,
                "weight_decay": 0.0 if no_decay else config["weight_decay"],
                "lr": config["lr"] * (config["head_lr_scale"] if head else 1.0),
            }
            for (head, no_decay), params in sorted(groups.items())
        ],
        lr=config["lr"],
    )
    train_ids, train_labels = config["train_ids"], np.asarray(config["train_labels"])
    lengths = np.array([len(x) for x in train_ids])
    per_epoch = len(plan_batches(lengths, config["batch_size"], config["seed"], 0, world))
    total = per_epoch * config["epochs"]
    warmup = int(round(config["warmup_ratio"] * total))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, linear_schedule(warmup, total))
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])

    def save(metrics: dict) -> None:
        """Report metrics and a checkpoint (written by rank 0; every rank must call report)."""
        if rank != 0:
            ray.train.report(metrics, checkpoint=None)
            return
        progress["model_fingerprint"] = fingerprint(core)
        with tempfile.TemporaryDirectory() as folder:
            core.save_pretrained(folder)  # safetensors: the only format transformers 5 writes
            torch.save(
                {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()},
                Path(folder) / "train_state.pt",
            )
            (Path(folder) / "progress.json").write_text(json.dumps(progress))
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(folder))

    log = _printer(rank)
    if progress["epoch"] >= config["epochs"]:
        log(f"nothing left to train: {progress['epoch']} of {config['epochs']} epochs done")
        return
    if resumed:
        log(f"resuming at epoch {progress['epoch'] + 1}, batch {progress['batch']} (step {progress['step']})")
    log_every, every = config["log_every"], config["checkpoint_every"]
    first_step, loop_start = progress["step"], time.perf_counter()  # the ETA counts this attempt's steps only
    for epoch in range(progress["epoch"], config["epochs"]):
        plan = plan_batches(lengths, config["batch_size"], config["seed"], epoch, world)
        torch.manual_seed((config["seed"] * 1_000_003 + epoch * 1009 + rank * 7 + progress["batch"]) % 2**62)
        model.train()
        window_loss, window_rows, window_docs, window_start = 0.0, 0, 0, time.perf_counter()
        epoch_start = time.perf_counter()
        for b in range(progress["batch"], len(plan)):
            rows = plan[b][rank::world]
            batch = collate(train_ids, train_labels, rows, config["pad_id"], device)
            with autocast:
                loss = model(**batch).loss
            loss.backward()
            if config["max_grad_norm"]:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config["max_grad_norm"])
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            progress["step"] += 1
            progress["batch"] = b + 1
            window_loss += float(loss.detach()) * len(rows)
            window_rows += len(rows)
            window_docs += len(plan[b])
            last = b + 1 == len(plan)
            if progress["step"] % log_every == 0 or last:
                loss_sum, rows_sum = _all_reduce([window_loss, window_rows], device, world)
                elapsed = time.perf_counter() - window_start
                progress["epoch_loss"] += loss_sum
                progress["epoch_rows"] += int(rows_sum)
                point = {
                    "step": progress["step"],
                    "epoch": epoch + 1,
                    "loss": round(loss_sum / max(rows_sum, 1), 5),
                    "lr": scheduler.get_last_lr()[0],
                    "docs_per_s": round(window_docs / max(elapsed, 1e-9), 2),
                }
                progress["curve"].append(point)
                left = eta(progress["step"] - first_step, total - first_step, time.perf_counter() - loop_start)
                log(
                    f"epoch {epoch + 1}/{config['epochs']} step {progress['step']}/{total} loss {point['loss']:.4f} "
                    f"lr {point['lr']:.2e} {point['docs_per_s']:.1f} docs/s"
                    + (f", ETA {format_seconds(left)} (training)" if left is not None else "")
                )
                window_loss, window_rows, window_docs, window_start = 0.0, 0, 0, time.perf_counter()
            if every and progress["step"] % every == 0 and not last:
                progress["train_seconds"] += time.perf_counter() - epoch_start
                epoch_start = time.perf_counter()
                save({"epoch": epoch + 1, "step": progress["step"], "train_loss": progress["curve"][-1]["loss"]})
        progress["train_seconds"] += time.perf_counter() - epoch_start
        evaluated = evaluate(core, config, device, rank, world, autocast)  # no DDP: ranks score unequal batches
        summary = {
            "epoch": epoch + 1,
            "step": progress["step"],
            "train_loss": round(progress["epoch_loss"] / max(progress["epoch_rows"], 1), 5),
            **evaluated,
        }
        progress["epochs"].append(summary)
        progress.update(epoch=epoch + 1, batch=0, epoch_loss=0.0, epoch_rows=0)
        log(
            f"epoch {epoch + 1} done: train loss {summary['train_loss']:.4f}, held-out accuracy "
            f"{summary['eval_accuracy']:.4f} ({summary['eval_docs']} reviews, {summary['eval_seconds']:.0f} s)"
        )
        save(summary)
        if config.get("fail_after_epoch") == epoch + 1 and not resumed:
            # Wait until the controller has registered the checkpoint: crash after it, not during it.
            ray.train.get_all_reported_checkpoints(timeout_s=120)
            raise RuntimeError(f"fail_after_epoch={epoch + 1}: simulated failure after the epoch's checkpoint")


def evaluate(model, config: dict, device, rank: int, world: int, autocast) -> dict:
    """Held-out accuracy and loss, each worker scoring its slice; sums are all-reduced."""
    import torch

    started = time.perf_counter()
    ids, labels = config["eval_ids"], np.asarray(config["eval_labels"])
    mine = np.arange(len(ids))[rank::world]
    lengths = [len(ids[i]) for i in mine]
    # eval_batch_size rows of the longest review set the token budget: shorter reviews pack more rows
    budget = config["eval_batch_size"] * max(lengths, default=1)
    correct = loss_sum = 0.0
    model.eval()
    with torch.no_grad():
        for batch_rows in token_budget_batches(lengths, budget):
            rows = mine[batch_rows]
            batch = collate(ids, labels, rows, config["pad_id"], device)
            with autocast:
                logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.float()
            loss_sum += float(torch.nn.functional.cross_entropy(logits, batch["labels"], reduction="sum"))
            correct += float((logits.argmax(-1) == batch["labels"]).sum())
    correct, loss_sum, n = _all_reduce([correct, loss_sum, len(mine)], device, world)
    return {
        "eval_accuracy": round(correct / max(n, 1), 5),
        "eval_loss": round(loss_sum / max(n, 1), 5),
        "eval_docs": int(n),
        "eval_seconds": round(time.perf_counter() - started, 2),
    }


def _load(cls, source: str, config: dict, pickle_ok: bool):
    import torch

    labels = {0: "negative", 1: "positive"}
    return cls.from_pretrained(
        source,
        num_labels=2,
        id2label=labels,
        label2id={v: k for k, v in labels.items()},
        attn_implementation="sdpa",
        ignore_mismatched_sizes=True,  # a base with a head of other classes gets a fresh 2-class head
        dtype=torch.float32,  # fp32 master weights whatever the checkpoint's dtype; autocast does the rest
        use_safetensors=None if pickle_ok else True,
        trust_remote_code=config["trust_remote_code"],
    )


def _is_head(name: str) -> bool:
    """The classification head (and BERT's pooler, which feeds it) of any encoder family."""
    return name.startswith(("classifier", "pre_classifier")) or ".pooler." in f".{name}"


def _no_decay(name: str) -> bool:
    return name.endswith(".bias") or "LayerNorm" in name or "layer_norm" in name


def _all_reduce(values: list[float], device, world: int) -> list[float]:
    import torch
    import torch.distributed as dist

    if world == 1 or not (dist.is_available() and dist.is_initialized()):
        return [float(v) for v in values]
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return tensor.tolist()


def _printer(rank: int):
    import logging

    def log(message: str) -> None:
        if rank == 0:  # Ray Train sends the worker's root logger to the driver (print would show twice)
            logging.getLogger().info("[finetune] %s", message)

    return log


def model_files(folder: str | os.PathLike) -> list[Path]:
    """The Hugging Face model files of a checkpoint (weights + config), not its training state."""
    return [p for p in sorted(Path(folder).iterdir()) if p.is_file() and p.name not in MODEL_FILES_SKIP]
