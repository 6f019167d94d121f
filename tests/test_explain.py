"""`xai-ray explain`: the page carries every head's attention (checked against an eager forward
pass), word-level maps follow Clark et al.'s rules, the CLI reads stored reviews, and the page
renders in headless Chromium offline with a hostile review left as text."""

from __future__ import annotations

import base64
import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from xai_ray import cli, pipeline
from xai_ray.config import resolve
from xai_ray.model.loading import load_model
from xai_ray.report import explain
from xai_ray.scoring.actor import Scorer
from xai_ray.words import merge_attention

HOSTILE = "<script>document.title='PWNED'</script> the film was <img src=x onerror=\"document.title='PWNED'\"> unbelievable, good!"
FAMILY = "bert"


def page_data(page: str) -> dict:
    found = re.search(r'<script type="application/json" id="xai-data">(.*?)</script>', page, re.S)
    assert found
    return json.loads(found.group(1))


def decoded(b64: str, shape) -> np.ndarray:
    raw = np.frombuffer(base64.b64decode(b64), dtype="<u2").astype(np.float64) / 65535
    return (raw**2).reshape(shape)


@pytest.fixture(scope="module")
def page_file(tiny_model_factory, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("explain") / "page.html"
    return explain.explain_text(HOSTILE, tiny_model_factory(FAMILY), out, max_length=64)


def test_page_holds_every_heads_attention(page_file, tiny_model_factory):
    page = page_file.read_text()
    data = page_data(page)
    loaded = load_model(tiny_model_factory(FAMILY), attn_implementation="eager")
    encoding = loaded.tokenizer(HOSTILE, truncation=True, max_length=64, return_tensors="pt")
    with torch.no_grad():
        attention = torch.stack(loaded.model(**encoding, output_attentions=True).attentions)[:, 0].numpy()
    n = attention.shape[-1]
    assert data["tokens"] == loaded.tokenizer.convert_ids_to_tokens(encoding["input_ids"][0])
    assert (data["layers"], data["heads"]) == attention.shape[:2] == (2, 2)
    got = decoded(data["token_attention"], attention.shape)
    np.testing.assert_allclose(got, attention, atol=1e-4)  # sqrt-uint16 steps: < 3e-5 near 1

    # words: [CLS] and [SEP] stay their own words; "unbelievable" is un ##believ ##able
    word_ids = encoding.word_ids(0)
    groups: list[list[int]] = []
    for position, wid in enumerate(word_ids):
        if wid is not None and position > 0 and word_ids[position - 1] == wid:
            groups[-1].append(position)
        else:
            groups.append([position])
    assert len(data["words"]) == len(groups) and data["words"][0] == "[CLS]" and data["words"][-1] == "[SEP]"
    assert "unbelievable" in data["words"] and max(len(g) for g in groups) == 3
    words = decoded(data["word_attention"], (2, 2, len(groups), len(groups)))
    for a, rows in enumerate(groups):
        for b, columns in enumerate(groups):
            expected = np.mean([attention[..., i, columns].sum(-1) for i in rows], axis=0)  # (L, H)
            np.testing.assert_allclose(words[..., a, b], expected, atol=1e-4)
    np.testing.assert_allclose(words.sum(-1), 1.0, atol=1e-3)  # nothing dropped: rows still sum to 1
    assert n == len(data["tokens"])


def test_merge_attention_keeps_leading_axes():
    rng = np.random.default_rng(0)
    attention = rng.random((3, 2, 5, 5))
    index = np.array([-1, 0, 0, 1, -1])
    batched = merge_attention(attention, index, 2)
    assert batched.shape == (3, 2, 2, 2)
    for layer in range(3):
        for head in range(2):
            np.testing.assert_allclose(batched[layer, head], merge_attention(attention[layer, head], index, 2))
    # word 0 = positions 1, 2; word 1 = position 3: to = sum of columns, from = mean of rows
    expected = (attention[0, 0, 1, 1] + attention[0, 0, 1, 2] + attention[0, 0, 2, 1] + attention[0, 0, 2, 2]) / 2
    assert batched[0, 0, 0, 0] == pytest.approx(expected)


def test_page_is_self_contained_and_escapes_the_review(page_file):
    page = page_file.read_text()
    assert not re.search(r"""(src|href|url)\s*[=(]\s*["']?(https?:)?//""", page)
    markup = re.sub(r"<script.*?</script>", "", page, flags=re.S)
    assert "<img" not in markup and "document.title='PWNED'</script>" not in page
    assert "&lt;script&gt;document.title=&#x27;PWNED&#x27;&lt;/script&gt;" in re.sub(r"</?span[^>]*>", "", markup)
    for section in ("summary", "highlights", "attention", "curves", "head-statistics"):
        assert f"<section id='{section}'>" in page
    assert page.count("vegaEmbed('#chart-") == 3


@pytest.fixture(scope="module")
def tiny_store(tiny_model_factory, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("explain-store")
    cfg = resolve(
        None,
        {"model": tiny_model_factory(FAMILY), "max_length": 24, "store": str(root / "store"), "methods": "raw,rollout"},
    )
    texts = ["the film was good", HOSTILE, "a bad movie, very boring"]
    rows = Scorer({**cfg.to_dict(), "gpus_per_actor": 0})(
        {"doc_id": ["a", "b<i>", "c"], "text": texts, "label": [1, 0, 0]}
    )
    pipeline.write([rows], cfg, "r1", n_input=3)
    return Path(cfg.store)


def test_cli_explains_a_stored_review_as_its_run_scored_it(tiny_store, tmp_path, capsys):
    out = tmp_path / "doc.html"
    assert cli.main(["explain", "--store", str(tiny_store), "--doc-id", "b<i>", "--out", str(out)]) == 0
    page = out.read_text()
    data = page_data(page)
    assert len(data["tokens"]) == 24  # the run's max_length cut the review
    assert "b&lt;i&gt;" in page and "<i>" not in re.sub(r"<script.*?</script>", "", page, flags=re.S)
    assert "run r1 of store" in page and "rollout, layer 2" in page and "flow, layer" not in page
    capsys.readouterr()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["explain", "--out", "x.html"], "exactly one of them"),
        (["explain", "some text", "--out", "x.html"], "needs --model"),
        (["explain", "--doc-id", "a", "--out", "x.html"], "needs --store"),
        (["explain", "--store", "STORE", "--doc-id", "zzz", "--out", "x.html"], "no document 'zzz' in run 'r1'"),
        (["explain", "   ", "--model", "MODEL", "--out", "x.html"], "empty"),
        (["explain", "text", "--model", "MODEL", "--methods", "raw,nope", "--out", "x.html"], "unknown method"),
        # an empty list fell back to the defaults without a word (run refuses it)
        (["explain", "text", "--model", "MODEL", "--methods", "", "--out", "x.html"], "--methods is empty"),
        (["explain", "--store", "STORE", "--doc-id", "a", "--methods", ",,,", "--out", "x.html"], "--methods is empty"),
        # taken and dropped without a word: a text is explained alone
        (["explain", "text", "--model", "MODEL", "--run", "r1", "--out", "x.html"], "--run picks a stored review"),
        (["explain", "text", "--model", "MODEL", "--store", "STORE", "--out", "x.html"], "--store picks a stored"),
    ],
)
def test_cli_mistakes_are_one_sentence(tiny_store, tiny_model_factory, tmp_path, capsys, argv, message):
    argv = [
        a.replace("STORE", str(tiny_store))
        .replace("MODEL", tiny_model_factory(FAMILY))
        .replace("x.html", str(tmp_path / "x.html"))
        for a in argv
    ]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("xai-ray: ") and message in err and "Traceback" not in err


@pytest.mark.slow
@pytest.mark.browser
def test_page_renders_in_headless_chromium(page_file, tmp_path, chromium):
    net_log = tmp_path / "net.json"
    base = chromium(tmp_path, net_log)
    dom = subprocess.run([*base, "--dump-dom", page_file.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line and "source: file://" in line]
    assert console == [], console
    html = dom.stdout
    assert 'data-ready="1"' in html  # the explorer's script ran to its end
    assert 'data-drawn="4"' in html  # model view: 2 layers x 2 heads
    assert html.count("<option") == 2 + 3  # layers; mean + heads
    assert 'id="pick-layer"' in html and 'id="pick-head"' in html and 'type="radio"' in html
    charts = re.split(r"<div class=\"chart[^\"]*\" id=\"chart-\d\"", html)[1:]
    assert len(charts) == 3 and all("<svg" in c.split("</section>")[0] for c in charts)
    assert "<title>xai-ray explain: review</title>" in html  # the hostile review's handlers never ran
    markup = re.sub(r"<script.*?</script>", "", html, flags=re.S)
    assert "<img" not in markup and "PWNED</title>" not in markup
    strip = re.search(r'<div id="tokens" class="tokens">(.*?)</div>', markup, re.S).group(1)
    spans = re.findall(r"<span[^>]*>(.*?)</span>", strip)
    assert spans[0] == "[CLS]" and "&lt;" in spans and "script" in spans and "img" in spans  # as text
    events = json.loads(net_log.read_text()).get("events", [])
    requests = [
        e["params"]["url"]
        for e in events
        if "file://" in str(e.get("params", {}).get("network_isolation_key", "")) and "url" in e["params"]
    ]
    assert [u for u in requests if not u.startswith("file:")] == []


def _stored_run(tmp_path, model: str, long_text: str, run_id: str) -> Path:
    cfg = resolve(None, {"model": model, "max_length": 24, "store": str(tmp_path / "store"), "methods": "raw,rollout"})
    cfg = cfg.__class__(**{**cfg.to_dict(), "long_text": long_text, "methods": ("raw", "rollout")})
    rows = Scorer({**cfg.to_dict(), "gpus_per_actor": 0})({"doc_id": ["h"], "text": [HOSTILE * 3], "label": [1]})
    pipeline.write([rows], cfg, run_id, n_input=1)
    return Path(cfg.store)


def test_a_stored_review_is_explained_with_its_runs_cut_and_weights(tiny_model_factory, tmp_path, capsys):
    """`explain --doc-id` re-scored a head_tail run's review as plain head truncation (other tokens,
    other scores) and drew its head view from yet another input; a window run's review was cut to
    one window; a model folder holding other weights since the run was used without a word."""
    import shutil

    from xai_ray.query.connection import open_store

    model = tmp_path / "model"
    shutil.copytree(tiny_model_factory(FAMILY), model)
    store = _stored_run(tmp_path, str(model), "head_tail", "ht")
    out = tmp_path / "ht.html"
    assert cli.main(["explain", "--store", str(store), "--run", "ht", "--doc-id", "h", "--out", str(out)]) == 0
    tokens = page_data(out.read_text())["tokens"]
    query = "select token from tokens where run_id = 'ht' and method = 'raw' and layer = 1 order by position"
    assert tokens == open_store(store).execute(query).df().token.tolist()  # the input the run scored
    assert tokens != explain_tokens_of_head(model, 24)  # its tail, not plain truncation
    store_w = _stored_run(tmp_path / "w", str(model), "window", "w")
    assert cli.main(["explain", "--store", str(store_w), "--run", "w", "--doc-id", "h", "--out", str(out)]) == 2
    assert "scored 'h' in windows" in capsys.readouterr().err
    weights = next(model.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:-4] + b"\0\0\0\1")  # other weights under the run's model path
    assert cli.main(["explain", "--store", str(store), "--run", "ht", "--doc-id", "h", "--out", str(out)]) == 2
    assert "is not the one the run scored with" in capsys.readouterr().err


def test_a_stored_review_scored_with_other_settings_says_so(tiny_model_factory, tmp_path):
    """`explain --doc-id --max-length 16` showed "Source: run ... of store ..." over scores the run
    never had (other tokens, another probability); the page now names what differs."""
    store = _stored_run(tmp_path, tiny_model_factory(FAMILY), "head", "h1")
    out = tmp_path / "page.html"
    argv = ["explain", "--store", str(store), "--run", "h1", "--doc-id", "h", "--out", str(out)]
    assert cli.main(argv) == 0
    assert "scored again with" not in out.read_text()
    assert cli.main([*argv, "--max-length", "16", "--methods", "raw"]) == 0
    page = out.read_text()
    assert "scored again with max_length 16 (the run&#x27;s: 24); methods raw (the run&#x27;s: raw,rollout)" in page
    model = tiny_model_factory(FAMILY)
    assert cli.main([*argv, "--model", model + "/", "--methods", "rollout,raw", "--max-length", "24"]) == 0
    assert "scored again with" not in out.read_text()  # the same settings, spelled otherwise


def explain_tokens_of_head(model: Path, max_length: int) -> list[str]:
    tokenizer = load_model(str(model)).tokenizer
    return tokenizer.convert_ids_to_tokens(tokenizer(HOSTILE * 3, truncation=True, max_length=max_length)["input_ids"])


def test_a_review_from_stdin_and_the_cut_of_the_notebook_api(tiny_model_factory, tmp_path, capsys, monkeypatch):
    """A 1 MB review could not be given on the command line (the argument list's limit): `-` reads it
    from stdin. `xai_ray.explain(..., long_text="window")` was taken and silently dropped."""
    import io

    import xai_ray

    model = tiny_model_factory(FAMILY)
    out = tmp_path / "stdin.html"
    monkeypatch.setattr("sys.stdin", io.StringIO("the film was good " * 20_000))
    assert cli.main(["explain", "-", "--model", model, "--max-length", "24", "--out", str(out)]) == 0
    assert len(page_data(out.read_text())["tokens"]) == 24
    with pytest.raises(ValueError, match="cut the review into several windows"):
        xai_ray.explain("the film was good " * 40, model=model, methods="raw", max_length=24, long_text="window")
    tail = xai_ray.explain(HOSTILE * 3, model=model, methods="raw", max_length=24, long_text="head_tail")
    head = xai_ray.explain(HOSTILE * 3, model=model, methods="raw", max_length=24, long_text="head")
    assert page_data(tail.page)["tokens"] != page_data(head.page)["tokens"]  # the cut reached the scorer


def test_undecodable_bytes_on_stdin_are_named_not_a_tokenizer_error(tiny_model_factory, tmp_path, capsys, monkeypatch):
    """Python reads undecodable stdin bytes as lone surrogates (surrogateescape): the tokenizer's
    TypeError was the message."""
    import io

    import xai_ray

    model = tiny_model_factory(FAMILY)
    raw = io.TextIOWrapper(io.BytesIO(b"good \xff\xfe film"), encoding="utf-8", errors="surrogateescape")
    monkeypatch.setattr("sys.stdin", raw)
    assert cli.main(["explain", "-", "--model", model, "--out", str(tmp_path / "p.html")]) == 2
    err = capsys.readouterr().err
    assert "not valid UTF-8: byte 0xff at character 5" in err and "TypeError" not in err, err
    with pytest.raises(ValueError, match="a lone surrogate U\\+D800 at character 5"):
        xai_ray.explain("good \ud800 film", model=model, methods="raw")


@pytest.mark.slow
@pytest.mark.browser
def test_a_very_long_word_wraps_inside_its_column(tiny_bert_dir, tmp_path, chromium):
    """A word of 3,000 letters ran through its neighbours' shaded-review columns and past the
    token strip, widening the page. Measured in the browser: a script added to the page counts
    the columns and strips wider than their box, and the page is no wider than a short review's."""
    import xai_ray

    measure = (
        "<script>window.addEventListener('load', () => {"
        "const wide = [...document.querySelectorAll('.hl, .tokens')].filter(e => e.scrollWidth > e.clientWidth + 1);"
        "document.body.dataset.wide = String(wide.length);"
        "document.body.dataset.width = String(document.documentElement.scrollWidth);"
        "});</script></body>"
    )
    found = {}
    for name, text in (("short", "a fine review"), ("long", "a " + "long" * 750 + " review")):
        review = xai_ray.explain(text, model=tiny_bert_dir, methods="raw,rollout", max_length=16)
        page = tmp_path / f"{name}.html"
        page.write_text(review.page.replace("</body>", measure))
        dom = subprocess.run(
            [*chromium(tmp_path), "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120
        )
        assert dom.returncode == 0, dom.stderr[-2000:]
        found[name] = re.search(r'<body[^>]*data-wide="(\d+)" data-width="(\d+)"', dom.stdout).groups()
    assert found["long"][0] == "0", found  # no column or strip wider than its box
    assert found["long"][1] == found["short"][1], found  # nor the page wider for it


def test_a_stored_reviews_true_label_is_named_by_its_runs_classes(tiny_model_factory, tmp_path):
    """Explained with another model, a 3-class run's "neutral" (class 1) was named by that model's
    classes: "positive" by a 2-class model's."""
    store = _stored_run(tmp_path, tiny_model_factory(FAMILY, classes=3), "head", "three")  # label 1: neutral
    out = tmp_path / "page.html"
    argv = ["explain", "--store", str(store), "--run", "three", "--doc-id", "h", "--out", str(out)]
    for other in ([], ["--model", tiny_model_factory(FAMILY)]):  # its own model, then a 2-class one
        assert cli.main([*argv, *other]) == 0
        assert "<th>True label</th><td>neutral</td>" in out.read_text()
