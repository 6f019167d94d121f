"""``xai-ray finetune``: real fine-tunes of the packaged MiniLM weights on real IMDB reviews, on Ray Train.

The Ray tests start a local cluster; run them inside a loopback-only network namespace
(``bash scripts/loopback.sh .venv/bin/python -m pytest tests/test_finetune.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from xai_ray import cli
from xai_ray.config import ConfigError
from xai_ray.data.corpus import read_corpus
from xai_ray.model.loading import ModelError
from xai_ray.train.batches import plan_batches
from xai_ray.train.examples import FinetuneError, encode, fingerprint_rows, split_rows
from xai_ray.train.finetune import run_finetune
from xai_ray.train.settings import resolve

IMDB = Path(__file__).resolve().parents[2] / "shared" / "data" / "imdb" / "train.parquet"
# The learning run: 600 seeded reviews, 480 to train and 120 held out, 128 tokens, 1 epoch (~50 s on 2 CPUs).
LEARN = [
    "--limit",
    "600",
    "--eval-fraction",
    "0.2",
    "--max-length",
    "128",
    "--epochs",
    "1",
    "--lr",
    "2e-4",
    "--batch-size",
    "16",
    "--seed",
    "0",
]
# The resume runs: small and short, only the bookkeeping matters.
TINY = {
    "data": str(IMDB),
    "limit": 120,
    "eval_fraction": 0.25,
    "max_length": 32,
    "epochs": 2,
    "batch_size": 16,
    "seed": 3,
    "log_every": 2,
}

ray_test = [pytest.mark.slow, pytest.mark.ray]


@pytest.fixture(scope="module")
def finetuned(ray_cluster, tmp_path_factory):
    out = tmp_path_factory.mktemp("finetuned") / "model"
    status = cli.main(["finetune", "--base", "minilm", "--data", str(IMDB), *LEARN, "--out", str(out)])
    assert status == 0
    return out, json.loads((out / "metrics.json").read_text())


# ---------------------------------------------------------------- the real fine-tune


@pytest.mark.slow
@pytest.mark.ray
def test_finetune_beats_the_majority_class(finetuned):
    _, metrics = finetuned
    assert metrics["data"]["train_docs"] == 480 and metrics["data"]["heldout_docs"] == 120
    assert metrics["heldout_accuracy"] >= metrics["majority_baseline"] + 0.1, metrics["epochs"]
    assert [e["epoch"] for e in metrics["epochs"]] == [1]
    assert metrics["heldout_loss"] < np.log(2)  # better than a coin flip in loss too


@pytest.mark.slow
@pytest.mark.ray
def test_output_folder_loads_and_predicts(finetuned):
    from xai_ray.model.loading import load_model
    from xai_ray.scoring.actor import Scorer

    out, metrics = finetuned
    assert (out / "model.safetensors").is_file() and not list(out.glob("*.bin"))
    assert (out / "tokenizer.json").is_file() and not (out / "_checkpoints").exists()
    # what it learned from, for `run`'s long_text=auto: head + tail at the trained length
    assert json.loads((out / "xai_ray_input.json").read_text()) == {"truncation": "head_tail", "max_length": 128}
    assert (
        Scorer({"model": str(out), "max_length": 64, "methods": ["raw"], "long_text": "auto"}).long_text == "head_tail"
    )
    loaded = load_model(str(out))
    assert loaded.info["labels"] == {0: "negative", 1: "positive"}
    assert loaded.info["fingerprint"] == metrics["model_fingerprint"]  # the weights that were evaluated
    # What `xai-ray run --model OUT` does per batch: the actors' scorer on real reviews.
    reviews = read_corpus(str(IMDB), split="train", limit=6, seed=11)
    rows = Scorer({"model": str(out), "max_length": 64, "methods": ["raw", "rollout"]})(
        {"doc_id": reviews.doc_id.values, "text": reviews.text.values, "label": reviews.label.values}
    ).to_pandas()
    assert len(rows) == 6 and set(rows.pred) <= {0, 1}
    assert np.allclose([sum(p) for p in rows.probs], 1.0, atol=1e-5)


@pytest.mark.slow
@pytest.mark.ray
def test_metrics_record_disjoint_heldout_ids_and_data(finetuned):
    out, metrics = finetuned
    heldout = metrics["heldout_ids"]
    assert (out / "heldout_ids.txt").read_text().split() == heldout
    corpus = read_corpus(str(IMDB), split="train", limit=600, seed=0)
    train_ids = set(corpus.doc_id) - set(heldout)
    assert len(set(heldout)) == 120 and set(heldout) <= set(corpus.doc_id) and len(train_ids) == 480
    counts = corpus[corpus.doc_id.isin(heldout)].label.value_counts()
    assert abs(counts[0] - counts[1]) <= 2  # stratified: the corpus sample is near-balanced, so is the slice
    train, held = split_rows(corpus.assign(label=corpus.label.astype("int64")), 0.2, 0)
    assert held.doc_id.tolist() == heldout and set(train.doc_id) == train_ids
    assert metrics["data"]["fingerprint"] == fingerprint_rows(pd.concat([train, held]))
    assert metrics["config"]["max_length"] == 128 and metrics["config"]["base"] == "minilm"
    steps = [p["step"] for p in metrics["loss_curve"]]
    assert steps == sorted(set(steps)) and steps[-1] == metrics["epochs"][-1]["step"]
    assert all(p["docs_per_s"] > 0 and np.isfinite(p["loss"]) for p in metrics["loss_curve"])
    assert metrics["versions"]["ray"] and metrics["versions"]["torch"] and metrics["timings"]["total_s"] > 0


# ---------------------------------------------------------------- interrupted and resumed


@pytest.mark.slow
@pytest.mark.ray
def test_interrupted_job_resumes_from_its_checkpoint(ray_cluster, tmp_path):
    out = tmp_path / "model"
    cfg = resolve(None, {**TINY, "out": str(out)}, ["fail_after_epoch=1"])
    with pytest.raises(Exception, match="fail_after_epoch"):
        run_finetune(cfg)  # a worker dies right after epoch 1's checkpoint
    assert (out / "_checkpoints" / "job.json").is_file() and not (out / "metrics.json").exists()

    metrics = run_finetune(resolve(None, {**TINY, "out": str(out)})).metrics  # the same command again
    first, second = metrics["epochs"]
    assert [s["epoch"] for s in metrics["starts"]] == [1, 2]  # the second start began at epoch 2 ...
    assert metrics["starts"][1]["step"] == first["step"] > 0  # ... after epoch 1's steps, not from scratch
    assert second["step"] == 2 * first["step"]
    steps = [p["step"] for p in metrics["loss_curve"]]
    assert steps == sorted(set(steps))  # one loss curve, continued
    assert not (out / "_checkpoints").exists()

    # Resuming at an epoch boundary restores everything: same weights as a run that never stopped.
    straight = run_finetune(resolve(None, {**TINY, "out": str(tmp_path / "straight")})).metrics
    assert straight["model_fingerprint"] == metrics["model_fingerprint"]
    assert [s["epoch"] for s in straight["starts"]] == [1]


@pytest.mark.slow
@pytest.mark.ray
def test_a_relative_base_with_a_head_of_three_classes_gets_a_fresh_two_class_head(
    ray_cluster, tiny_model_factory, tmp_path, monkeypatch
):
    """The workers resolved a relative --base from their own folder (then tried the Hub), and a
    base whose head has three classes failed to load with a two-class one."""
    import shutil

    shutil.copytree(tiny_model_factory("bert", classes=3), tmp_path / "three")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "model"
    metrics = run_finetune(resolve(None, {**TINY, "epochs": 1, "base": "three", "out": str(out)})).metrics
    assert metrics["base"]["path"] == str(tmp_path / "three")
    from xai_ray.model.loading import load_model

    assert load_model(str(out)).info["labels"] == {0: "negative", 1: "positive"}


@pytest.mark.slow
@pytest.mark.ray
def test_worker_failure_is_recovered_within_one_run(ray_cluster, tmp_path):
    cfg = resolve(None, {**TINY, "epochs": 2, "out": str(tmp_path / "model")}, ["fail_after_epoch=1", "max_failures=1"])
    metrics = run_finetune(cfg).metrics  # FailureConfig(max_failures=1): Ray Train restarts the workers
    assert [s["epoch"] for s in metrics["starts"]] == [1, 2]
    assert [e["epoch"] for e in metrics["epochs"]] == [1, 2]


# ---------------------------------------------------------------- errors (no Ray needed)


def _fail(capsys, argv) -> str:
    assert cli.main(argv) == 2
    message = capsys.readouterr().err.strip()
    assert message.startswith("xai-ray: ") and "\n" not in message and "Traceback" not in message
    return message


def test_data_without_labels_is_refused(tmp_path, capsys):
    data = tmp_path / "reviews.csv"
    pd.DataFrame({"id": ["a", "b", "c", "d"], "text": ["good", "bad", "fine", "awful"]}).to_csv(data, index=False)
    message = _fail(capsys, ["finetune", "--data", str(data), "--out", str(tmp_path / "m")])
    assert "no labels" in message and "label_column" in message
    with pytest.raises(FinetuneError):
        run_finetune(resolve(None, {"data": str(data), "out": str(tmp_path / "m")}))


def test_labels_outside_the_two_classes_are_refused(tmp_path, capsys):
    data = tmp_path / "reviews.csv"
    pd.DataFrame(
        {"id": list("abcdef"), "text": ["good", "bad", "fine", "awful", "ok", "meh"], "label": [0, 1, 2, 1, 0, 5]}
    ).to_csv(data, index=False)
    message = _fail(capsys, ["finetune", "--data", str(data), "--out", str(tmp_path / "m")])
    assert "outside the classes {0, 1}" in message and "2, 5" in message


def test_a_base_model_that_is_not_an_encoder_is_refused(tmp_path, capsys):
    from transformers import GPT2Config

    base = tmp_path / "gpt2"
    GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=64, bos_token_id=0, eos_token_id=0).save_pretrained(base)
    message = _fail(capsys, ["finetune", "--base", str(base), "--data", str(IMDB), "--out", str(tmp_path / "m")])
    assert "gpt2" in message and "encoder" in message
    with pytest.raises(ModelError):
        run_finetune(resolve(None, {"base": str(base), "data": str(IMDB), "out": str(tmp_path / "m")}))


def test_an_out_holding_a_model_this_job_did_not_write_is_refused(tmp_path, tiny_bert_dir, capsys):
    import hashlib
    import shutil

    base = tmp_path / "base"
    shutil.copytree(tiny_bert_dir, base)  # a copy: the check failing must not touch the shared fixture
    weights = hashlib.sha256((base / "model.safetensors").read_bytes()).hexdigest()
    message = _fail(capsys, ["finetune", "--base", str(base), "--data", str(IMDB), "--out", str(base)])
    assert "is the base model's folder" in message
    other = tmp_path / "other"
    shutil.copytree(tiny_bert_dir, other)
    message = _fail(capsys, ["finetune", "--base", str(base), "--data", str(IMDB), "--out", str(other)])
    assert "holds a model this job did not write" in message
    assert hashlib.sha256((base / "model.safetensors").read_bytes()).hexdigest() == weights


def test_an_out_that_is_a_store_a_file_or_a_folder_of_the_users_is_refused_before_the_data(
    tmp_path, tiny_bert_dir, capsys
):
    """A store given as --out got config.json, model.safetensors and tokenizer files beside its
    runs/; a user's folder had its tokenizer.json replaced; a file was refused only after the data
    was read and tokenized."""
    store = tmp_path / "store"
    (store / "runs").mkdir(parents=True)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "tokenizer.json").write_text("{}")
    (mine / "metrics.json").write_text('{"my_experiment": 42}')  # a common name: taken for a fine-tune's
    afile = tmp_path / "afile"
    afile.write_text("x")
    missing = str(tmp_path / "no-such-corpus.parquet")  # never read: each is refused first
    for out, words in (
        (store, "is an xai-ray store"),
        (mine, "holds files this job did not write"),
        (afile, "is a file"),
    ):
        message = _fail(capsys, ["finetune", "--base", tiny_bert_dir, "--data", missing, "--out", str(out)])
        assert words in message and "give a new or empty folder" in message, message
    assert sorted(p.name for p in store.iterdir()) == ["runs"] and (mine / "tokenizer.json").read_text() == "{}"
    assert (mine / "metrics.json").read_text() == '{"my_experiment": 42}'


def test_a_checkpoint_of_another_job_is_not_resumed(tmp_path):
    out = tmp_path / "m"
    (out / "_checkpoints").mkdir(parents=True)
    (out / "_checkpoints" / "job.json").write_text(
        json.dumps({"job_key": "0" * 64, "config": {"lr": 1.0}, "data_fingerprint": "x"})
    )
    with pytest.raises(FinetuneError, match="different job .*lr.*data"):
        run_finetune(resolve(None, {**TINY, "out": str(out)}))


def test_config_precedence_and_errors(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("base: minilm\nlr: 1.0e-4\nepochs: 3\nmax_length: 128\nout: from-yaml\n")
    cfg = resolve(job, {"epochs": 2, "out": "flag"}, ["lr=2e-5", "workers=1"])
    assert (cfg.lr, cfg.epochs, cfg.max_length, cfg.out, cfg.workers) == (2e-5, 2, 128, "flag", 1)
    repo_job = resolve(Path(__file__).resolve().parents[1] / "jobs" / "finetune.yaml", {"out": "x"})
    assert repo_job.base == "minilm" and repo_job.limit == 4000 and repo_job.eval_fraction == 0.25
    with pytest.raises(ConfigError, match="out"):
        resolve(None, {"data": "x"})
    with pytest.raises(ConfigError, match="did you mean 'epochs'"):
        resolve(None, {"out": "x"}, ["epoch=2"])
    with pytest.raises(ConfigError, match="eval_fraction"):
        resolve(None, {"out": "x", "eval_fraction": 1.5})


# ---------------------------------------------------------------- batching and splitting


def test_batch_plan_covers_every_row_once_and_is_seeded():
    lengths = np.random.default_rng(0).integers(5, 300, size=203)
    plan = plan_batches(lengths, batch_size=16, seed=1, epoch=0, world=2)
    rows = np.concatenate(plan)
    assert sorted(rows.tolist()) == list(range(203))
    assert all(len(b) >= 2 for b in plan) and max(len(b) for b in plan) <= 16 + 1
    assert all(np.array_equal(a, b) for a, b in zip(plan, plan_batches(lengths, 16, 1, 0, 2)))
    assert not all(np.array_equal(a, b) for a, b in zip(plan, plan_batches(lengths, 16, 1, 1, 2)))
    # length bucketing: rows of a batch are close in length, so little padding
    padded = sum(len(b) * lengths[b].max() for b in plan)
    assert padded < 1.1 * lengths.sum()


def test_split_is_stratified_disjoint_and_seeded():
    rows = pd.DataFrame({"doc_id": [f"d{i}" for i in range(100)], "text": ["t"] * 100, "label": [0] * 70 + [1] * 30})
    train, held = split_rows(rows, 0.2, seed=4)
    assert held.label.value_counts().to_dict() == {0: 14, 1: 6}
    assert not set(train.doc_id) & set(held.doc_id) and len(train) + len(held) == 100
    assert split_rows(rows, 0.2, seed=4)[1].doc_id.tolist() == held.doc_id.tolist()
    assert split_rows(rows, 0.2, seed=5)[1].doc_id.tolist() != held.doc_id.tolist()
    # a class of one row was trained on and none of it held out ("accuracy 1.0 on 1, majority 1.0")
    few = pd.DataFrame({"doc_id": [f"d{i}" for i in range(11)], "text": ["t"] * 11, "label": [0] + [1] * 10})
    with pytest.raises(FinetuneError, match=r"at least two of each; rows per class: 0: 1, 1: 10"):
        split_rows(few, 0.2, seed=4)


def test_head_tail_truncation_keeps_both_ends_and_the_special_tokens(wordpiece_tokenizer):
    text = "the film was good and the plot was bad and the acting was fine"
    full = wordpiece_tokenizer(text)["input_ids"]
    head = encode(wordpiece_tokenizer, [text, "good"], 10, "head")
    head_tail = encode(wordpiece_tokenizer, [text, "good"], 10, "head_tail")
    assert head[0].tolist() == wordpiece_tokenizer(text, truncation=True, max_length=10)["input_ids"]
    assert head_tail[0].tolist() == full[:3] + full[-7:]  # [CLS] + 2 first tokens, 6 last tokens + [SEP]
    assert head_tail[1].tolist() == head[1].tolist() == wordpiece_tokenizer("good")["input_ids"]


def test_rows_with_an_empty_text_are_left_out_and_said(tmp_path, caplog):
    """A row with an empty text left the fine-tune without a word (9 of 10 rows trained and held
    out); every other bad row stops the job. It is left out, and the log says how many and which."""
    from xai_ray.train.examples import labelled_rows

    data = tmp_path / "c.csv"
    rows = [f"d{i},a review number {i},{i % 2}" for i in range(10)]
    rows[3] = "d3,,1"
    data.write_text("id,text,label\n" + "\n".join(rows) + "\n")
    got = labelled_rows(resolve(None, {**TINY, "data": str(data), "out": str(tmp_path / "m")}))
    assert len(got) == 9 and "d3" not in set(got.doc_id)
    assert (
        "1 rows of" in caplog.text
        and "have an empty text and are left out of the fine-tune; the first: 'd3'" in caplog.text
    )
