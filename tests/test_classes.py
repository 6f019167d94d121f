"""Any number of classes, and encoders accepted by what their attention does.

A three-class checkpoint loads with its own class names and scores with k probabilities; corpus
labels are class indices or the model's class names, anything else an errors row; a three-class
run goes end to end (Ray, topk per predicted class, a report with a 3 x 3 confusion matrix). An
encoder whose attention bypasses transformers' attention interface (DeBERTa-v2) is refused in
one sentence before any batch.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import THREE_CLASSES, build_wordpiece_tokenizer

from xai_ray.model.loading import ModelError, describe_model, label_names, load_model

FAMILIES = ("bert", "distilbert", "roberta")


def test_label_names_are_the_checkpoints_own():
    from transformers import BertConfig

    assert label_names(BertConfig(id2label=THREE_CLASSES)) == THREE_CLASSES
    assert label_names(BertConfig(num_labels=3)) == {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}
    assert label_names(BertConfig(num_labels=2)) == {0: "negative", 1: "positive"}  # placeholders of two
    assert label_names(BertConfig(id2label={0: "bad", 1: "good"})) == {0: "bad", 1: "good"}
    assert label_names(BertConfig(num_labels=5), num_labels=5) == {i: f"LABEL_{i}" for i in range(5)}


@pytest.mark.parametrize("family", FAMILIES)
def test_a_three_class_checkpoint_scores_with_its_names_and_k_probabilities(tiny_model_factory, family):
    import torch

    from xai_ray.scoring.actor import Scorer

    folder = tiny_model_factory(family, classes=3)
    assert describe_model(folder)["labels"] == THREE_CLASSES  # read from the config alone
    loaded = load_model(folder)
    assert loaded.info["labels"] == THREE_CLASSES and loaded.model.config.num_labels == 3
    texts = ["the film was good", "a bad plot and boring acting", "i loved the story"]
    table = Scorer({"model": folder, "max_length": 32, "methods": ["raw", "rollout"]})(
        {"doc_id": np.array(["a", "b", "c"]), "text": np.array(texts, dtype=object), "label": np.array([0, 2, 1])}
    )
    by_id = {r["doc_id"]: r for r in table.to_pylist()}  # rows come back grouped by length
    rows = [by_id[i] for i in ("a", "b", "c")]
    assert [r["error"] for r in rows] == [None] * 3
    # independently: the checkpoint as transformers loads it, eager attention, one text at a time
    plain = load_model(folder, attn_implementation="eager").model
    for text, row in zip(texts, rows):
        encoded = loaded.tokenizer(text, return_tensors="pt", truncation=True, max_length=32)
        with torch.no_grad():
            expected = torch.softmax(plain(**encoded).logits[0], dim=-1).numpy()
        assert len(row["probs"]) == 3 and sum(row["probs"]) == pytest.approx(1, abs=1e-5)
        np.testing.assert_allclose(row["probs"], expected, atol=1e-5)
        assert row["pred"] == int(expected.argmax())


def _tiny_deberta(folder, with_weights: bool = True):
    from transformers import DebertaV2Config, DebertaV2ForSequenceClassification

    tokenizer = build_wordpiece_tokenizer()
    config = DebertaV2Config(
        vocab_size=len(tokenizer),
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    if with_weights:
        DebertaV2ForSequenceClassification(config).save_pretrained(folder)
    else:
        config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def test_an_encoder_whose_attention_bypasses_the_interface_is_refused_in_one_sentence(tmp_path, capsys):
    from xai_ray import cli

    refusal = "cannot be explained here: its attention does not go through transformers' attention interface"
    folder = _tiny_deberta(tmp_path / "deberta")
    for call in (describe_model, load_model):
        with pytest.raises(ModelError, match=refusal) as caught:
            call(folder)
        message = str(caught.value)
        assert "(deberta-v2)" in message and "\n" not in message and message.count(". ") == 0
    # refused from its config alone, before any weight loads
    with pytest.raises(ModelError, match=refusal):
        describe_model(_tiny_deberta(tmp_path / "config-only", with_weights=False))
    # the command stops before Ray starts or any batch runs: exit 2, one line, no traceback
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": "a", "text": "the film was good", "label": 1}\n')
    status = cli.main(["run", "--data", str(corpus), "--model", folder, "--store", str(tmp_path / "store")])
    err = capsys.readouterr().err
    assert status == 2 and refusal in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "store" / "runs").exists()


@pytest.mark.parametrize("family", FAMILIES)
def test_encoders_through_the_interface_are_accepted(tiny_model_factory, family):
    from xai_ray.model import capture, loading

    assert loading.CAPTURE == capture.CAPTURE
    for lean in (True, False):  # the probe forward reached the capture once per layer, on both paths
        loaded = load_model(tiny_model_factory(family), lean=lean)
        assert type(loaded.model).__name__ == ("SequenceClassifier" if lean else loaded.model.config.architectures[0])
    assert type(loaded.model).is_backend_compatible()


def test_a_model_that_never_reaches_the_capture_is_refused_at_load(tiny_bert_dir, monkeypatch):
    from xai_ray.model import capture

    def silent(model, encoding, *args, **kwargs):
        raise RuntimeError("the model never called its attention function: it cannot be explained here")

    monkeypatch.setattr(capture, "forward_with_attention", silent)
    with pytest.raises(ModelError, match="does not go through transformers' attention interface"):
        load_model(tiny_bert_dir)


def test_labels_by_index_or_name_and_labels_outside_the_classes_are_error_rows(tmp_path):
    from xai_ray.data.corpus import read_corpus
    from xai_ray.data.screening import screen

    source = tmp_path / "c.jsonl"
    labels = ["0", "2", '"neutral"', '" POSITIVE "', "3", '"joy"', "-1", "null"]
    source.write_text("".join(f'{{"id": "d{i}", "text": "text", "label": {v}}}\n' for i, v in enumerate(labels)))
    corpus = read_corpus(str(source))
    kept, rejected = screen(corpus, THREE_CLASSES)
    assert len(kept) + len(rejected) == len(labels)
    assert kept.doc_id.tolist() == ["d0", "d1", "d2", "d3", "d7"]
    assert kept.label.tolist()[:4] == [0, 2, 1, 2] and pd.isna(kept.label.iloc[4])
    reasons = dict(zip(rejected.doc_id, rejected.reason))
    listing = "(0: negative, 1: neutral, 2: positive); use --set label_column=none to score without labels"
    assert reasons == {
        "d4": f"label 3 is not one of the model's classes {listing}",
        "d5": f"label 'joy' is not a class number nor one of the model's class names {listing}",
        "d6": f"label -1 is not one of the model's classes {listing}",
    }
    assert set(rejected.stage) == {"read"}


TEXTS = [
    "the film was good",
    "the movie was bad",
    "a great plot and fine acting",
    "not very good, not very bad.",
    "the acting was wonderful!",
    "i loved the film and the story",
    "this movie is boring",
    "it was playing the story",
    "good good good",
    "bad bad bad",
    "boring plot",
    "i loved it",
    "the acting was not good",
    "a wonderful story",
    "the film",
    "very bad acting",
    "playing the film was fine",
    "it is a movie",
    "this plot was boring and bad",
    "a fine film and a good story",
]


@pytest.mark.slow
@pytest.mark.ray
def test_a_three_class_run_end_to_end(ray_cluster, tmp_path, tiny_model_factory):
    from xai_ray import api, cli
    from xai_ray.query.connection import open_store
    from xai_ray.query.top_words import topk

    labels = [0, 1, 2, "negative", "neutral", "Positive"] * 3 + [0, 2]
    lines = [json.dumps({"id": f"t{i:02d}", "text": t, "label": lab}) for i, (t, lab) in enumerate(zip(TEXTS, labels))]
    lines += [json.dumps({"id": "bad-index", "text": "good", "label": 3})]
    lines += [json.dumps({"id": "bad-name", "text": "good", "label": "joy"})]
    source = tmp_path / "three.jsonl"
    source.write_text("\n".join(lines) + "\n")
    store = tmp_path / "store"
    model = tiny_model_factory("roberta", classes=3)
    argv = ["run", "--data", str(source), "--model", model, "--store", str(store), "--run-id", "k3"]
    argv += ["--methods", "raw,rollout", "--actors", "1", "--max-length", "32", "--evaluate"]
    assert cli.main(argv) == 0
    con = open_store(store)
    docs = con.execute("select * from docs where run_id = 'k3' order by doc_id").df()
    errors = con.execute("select doc_id, stage, reason from errors where run_id = 'k3'").df()
    assert len(docs) == len(TEXTS) and len(docs) + len(errors) == len(lines)
    reasons = dict(zip(errors.doc_id, errors.reason))
    assert reasons["bad-index"].startswith("label 3 is not one of the model's classes (0: negative, 1: neutral")
    assert reasons["bad-name"].startswith("label 'joy' is not a class number nor one of the model's class names")
    written = {f"t{i:02d}": lab for i, lab in enumerate(labels)}
    as_index = {"negative": 0, "neutral": 1, "Positive": 2}
    assert dict(zip(docs.doc_id, docs.label)) == {k: as_index.get(v, v) for k, v in written.items()}
    probs = np.stack(docs.probs.to_numpy())
    assert probs.shape == (len(TEXTS), 3) and np.allclose(probs.sum(axis=1), 1, atol=1e-5)
    assert (docs.pred == probs.argmax(axis=1)).all() and docs.prob_pos.isna().all()
    predicted = sorted(docs.pred.unique())
    assert len(predicted) >= 2  # the seeded tiny model spreads these texts over its classes

    # topk per predicted class, against pandas over the words view: mean lift per review, then over reviews
    last = int(con.execute("select max(layer) from words where run_id = 'k3'").fetchone()[0])
    words = con.execute(
        "select doc_id, word, lift from words where run_id = 'k3' and method = 'rollout' and layer = ?", [last]
    ).df()
    per_doc = words.assign(word=words.word.str.lower()).groupby(["doc_id", "word"]).lift.mean().reset_index()
    per_doc = per_doc.merge(docs[["doc_id", "pred"]], on="doc_id")
    got = topk(con, run_id="k3", method="rollout", k=5, by="pred", min_docs=1)
    assert sorted(int(g) for g in got["group"].unique()) == predicted
    for cls in predicted:
        mine = per_doc[per_doc.pred == cls].groupby("word").agg(mean=("lift", "mean"), documents=("doc_id", "nunique"))
        expected = mine.reset_index().sort_values(["mean", "word"], ascending=[False, True]).head(5)
        rows = got[got["group"].astype(int) == cls]
        assert rows.word.tolist() == expected.word.tolist()
        np.testing.assert_allclose(rows.mean_score, expected["mean"], rtol=1e-5)
        assert rows.documents.tolist() == expected.documents.tolist()

    # the report: a 3 x 3 confusion matrix with the model's names, per-class facets, no 0-vs-1 contrast
    page = (store / "runs" / "run_id=k3" / "report.html").read_text()
    assert "<section id='summary'>" in page and "<section id='contrast'>" not in page
    assert all(f"Mean P({name})" in page for name in THREE_CLASSES.values())
    assert "<section id='faithfulness'>" in page and "comprehensiveness AOPC [95% t interval]" in page
    spec = api.confusion_chart(str(store), "k3").to_dict()
    cells = {(row["true"], row["predicted"]): row["documents"] for row in next(iter(spec["datasets"].values()))}
    counted = pd.crosstab(docs.label, docs.pred)
    assert len(cells) == 9 and sum(cells.values()) == len(docs)
    for (true, pred), documents in cells.items():
        t, p = (next(k for k, v in THREE_CLASSES.items() if v == name) for name in (true, pred))
        assert documents == (counted.loc[t, p] if t in counted.index and p in counted.columns else 0)
    per_class = api.report_chart("per_class", str(store), "k3").to_dict()
    facets = {row["predicted"] for row in next(iter(per_class["datasets"].values()))}
    assert facets <= {THREE_CLASSES[c] for c in predicted} and len(facets) >= 1
    manifest = json.loads((store / "runs" / "run_id=k3" / "manifest.json").read_text())
    assert manifest["model"]["labels"] == {str(k): v for k, v in THREE_CLASSES.items()}


def test_the_attention_asked_for_is_recorded_and_decides_the_path(tiny_bert_dir):
    """transformers 5 keeps the attention implementation only in a private config field, so
    ``load_model`` records what it asked for, and the capture and the gradient pass read that."""
    from xai_ray.model import capture
    from xai_ray.model.attention_gradients import attention_gradients
    from xai_ray.model.attention_record import attention_of, record_attention

    captured, eager = load_model(tiny_bert_dir), load_model(tiny_bert_dir, attn_implementation="eager")
    assert (attention_of(captured.model), attention_of(eager.model)) == (
        capture.CAPTURE,
        "eager",
    )
    encoding = dict(captured.tokenizer(["a good film", "bad"], padding=True, return_tensors="pt"))
    _, through_capture = capture.forward_with_attention(captured.model, encoding)
    _, through_weights = capture.forward_with_attention(eager.model, encoding)
    n = int(encoding["attention_mask"][0].sum())  # the first review has no padding
    np.testing.assert_allclose(through_capture[0, :, :n, :n], through_weights[0, :, :n, :n], atol=1e-5)
    # the record, not the model, picks the path: swapped, each model goes down the other one and says so
    record_attention(captured.model, "eager")
    with pytest.raises(RuntimeError, match="returned no attention weights"):
        capture.forward_with_attention(captured.model, encoding)
    record_attention(eager.model, capture.CAPTURE)
    with pytest.raises(RuntimeError, match="never called its attention function"):
        capture.forward_with_attention(eager.model, encoding)
    with pytest.raises(RuntimeError, match="came through the capture 0 times"):
        attention_gradients(eager.model, encoding, [0, 1])
    package = Path(capture.__file__).parents[1]
    private = [
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and node.attr == "_attn_implementation"
    ]
    assert not private, f"transformers' private attention field read in {private}"
