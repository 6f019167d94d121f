"""``xai-ray explain``: one review in depth, as one self-contained offline HTML page.

The page holds every layer's and head's attention of the review (a head view with the review's
tokens or words on both sides, a model view of every head at once, a heatmap of the picked
head), the per-layer [CLS] curves of each method, the review shaded by each method, and the
review's own per-head statistics. The per-head attention comes from the capture's own blocks
(``xai_ray.methods.heads``: every row of the one review is kept), the scores from the scorer the
pipeline runs, so the page shows what a run would store. Word-level attention follows Clark et
al.'s rules (``words.merge_attention``); [CLS] and [SEP] stay as words of their own there.

The text reaches the page only as JSON inside a non-executed script element (with <, >, &
escaped) or through ``html.escape``; the page's script sets it with ``textContent``.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

import numpy as np
import pandas as pd

from xai_ray.config import ConfigError, RunConfig
from xai_ray.methods.head_summary import STATISTICS
from xai_ray.report import charts, head_charts
from xai_ray.report.blocks import number, text_html
from xai_ray.report.outputs import check_target, script_json, write_page
from xai_ray.report.sections import SHADE_NOTE, _curves, highlight_html
from xai_ray.terminal import undecodable
from xai_ray.words import merge_attention

SCRIPT = Path(__file__).parent / "static" / "explain.js"
DEFAULT_METHODS = ("raw", "rollout", "flow")
DEFAULT_MAX_LENGTH = 256  # a review's every head at 256 tokens is ~10 MB of page for a 6 x 12-head model


def explain_text(
    text: str,
    model: str,
    out: str | Path,
    max_length: int = DEFAULT_MAX_LENGTH,
    methods=DEFAULT_METHODS,
    options: dict | None = None,
    doc_id: str = "review",
    label: int | None = None,
    source: str = "",
    store: str | Path | None = None,
    fingerprint: str | None = None,
    true_label: str | None = None,
) -> Path:
    """Score ``text`` with ``model`` and write its explorer page to ``out``; returns the path.
    ``store``: the store the review came from, whose data files ``out`` may not name;
    ``true_label``: ``label`` as its run names it (another model's names are not its)."""
    check_target(out, store=store)  # before the model loads: a folder, a device, a link or a store file fails at once
    page, _ = explain_page(text, model, max_length, methods, options, doc_id, label, source, fingerprint, true_label)
    return write_page(out, page)


def explain_page(
    text: str,
    model: str,
    max_length: int = DEFAULT_MAX_LENGTH,
    methods=DEFAULT_METHODS,
    options: dict | None = None,
    doc_id: str = "review",
    label: int | None = None,
    source: str = "",
    fingerprint: str | None = None,
    true_label: str | None = None,
) -> tuple[str, dict]:
    """The explorer page of ``text`` as one HTML string, and the scorer's row it shows.
    ``fingerprint``: the weights the page must be scored with (a stored run's), else refused."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError("the text to explain is empty")
    if undecodable(text):  # a lone surrogate: what undecodable stdin bytes become, or a notebook's broken string
        raise ConfigError(f"the text to explain is not valid UTF-8: {undecodable(text)}; fix its encoding")
    config = {
        "model": model,
        "max_length": int(max_length),
        "methods": list(methods),
        **(options or {}),
        "heads": False,
        "gpus_per_actor": 0,
    }  # the per-head view comes from its own pass below
    from xai_ray.scoring.actor import Scorer

    scorer = Scorer(config)
    row = scorer({"doc_id": [doc_id], "text": [text], "label": [label]}).to_pylist()[0]
    if row.get("error"):
        raise ConfigError(f"the review cannot be explained: {row['error']}")
    if len(row["tokens"]) > scorer.max_length:  # long_text=window merged several model inputs
        raise ConfigError(
            f"long_text=window cut the review into several windows ({len(row['tokens'])} tokens); a page shows "
            "one model input: explain it with long_text head or head_tail"
        )
    if fingerprint and scorer.info["fingerprint"] != fingerprint:
        raise ConfigError(
            f"the model at {model!r} is not the one the run scored with (weights {scorer.info['fingerprint'][:12]}, "
            f"the run's {fingerprint[:12]}): the page would not show the run's scores; name another model "
            "with --model to explain with it on purpose"
        )
    attention, statistics = per_head_attention(scorer, text, row["tokens"])
    return build_page(row, attention, statistics, scorer.info, list(methods), source, true_label), row


def page_options(cfg: RunConfig) -> dict:
    """What of a run config a page is scored with beyond model, length and methods: the attention
    options, the class explained, the long-text cut and the safety flags."""
    return {
        **cfg.attention_options,
        "target": cfg.target,
        "ig_steps": cfg.ig_steps,
        "ig_tolerance": cfg.ig_tolerance,
        "long_text": cfg.long_text,
        "window_stride": cfg.window_stride,
        "allow_pickle": cfg.allow_pickle,
        "trust_remote_code": cfg.trust_remote_code,
    }


def scores_frame(row: dict, methods) -> pd.DataFrame:
    """Per method, layer and word of a scorer row: the normalised word score (as the words view)."""
    return _scores_frame(row, list(methods))


def explain_stored(
    store: str | Path,
    doc_id: str,
    out: str | Path,
    run_id: str | None = None,
    model: str | None = None,
    max_length: int | None = None,
    methods=None,
) -> Path:
    """The page of a review already in a store, scored as its run was (model, length, methods,
    options) unless told otherwise."""
    from xai_ray.query.connection import QueryError, open_store, pick_run, run_named

    con = open_store(store, run=run_id)
    run = pick_run(con, run_id)
    found = run_named(con, "explain_doc", run_id=run["run_id"], doc_id=str(doc_id))
    if found.empty:
        raise QueryError(f"no document {doc_id!r} in run {run['run_id']!r} (its errors view may say why)")
    manifest = json.loads(run["manifest"])
    saved = RunConfig.from_manifest(manifest)  # the run's own settings, checked
    doc = found.iloc[0]
    options = page_options(saved)  # its model input cut as it was
    fingerprint = None
    if model is not None and _same_model(model, saved.model):  # the run's own, named again: its checks too
        model = None
    if model is None:  # the run's own model: the safety flags it was run with apply to it, its weights too
        fingerprint = manifest.get("model", {}).get("fingerprint")
    else:
        options.update(allow_pickle=False, trust_remote_code=False)
    if saved.long_text == "window" and int(doc.n_tokens) > (max_length or saved.max_length):
        raise ConfigError(
            f"run {run['run_id']!r} scored {doc_id!r} in windows ({int(doc.n_tokens)} tokens, long_text=window); "
            'a page shows one model input: its stored scores are in the words view (xai-ray sql "select * '
            "from words where doc_id = '...'\")"
        )
    label = None if pd.isna(doc.label) else int(doc.label)
    # the stored label is a class of the run's model: named by it, whoever scores the page
    run_classes = manifest.get("model", {}).get("labels") or {}
    true_label = None if label is None else str(run_classes.get(str(label), label))
    # what was asked beside the run's own settings: the page says so (it claimed to show the run's scores)
    changed = [
        f"{name} {given} (the run's: {own})"
        for name, given, own, same in (
            ("model", model, saved.model, _same_model),
            ("max_length", max_length, saved.max_length, lambda a, b: int(a) == int(b)),
            ("methods", ",".join(methods or []) or None, ",".join(saved.methods), _same_methods),
        )
        if given is not None and not same(given, own)
    ]
    source = f"run {run['run_id']} of store {store}" + (f", scored again with {'; '.join(changed)}" if changed else "")
    return explain_text(
        doc.text,
        model or saved.model,
        out,
        max_length or saved.max_length,
        methods or list(saved.methods),
        options,
        str(doc_id),
        label,
        source=source,
        store=store,
        fingerprint=fingerprint,
        true_label=true_label,
    )


def _same_model(given: str, own: str) -> bool:
    """The same model named two ways (``models/m/`` and ``models/m``; a folder by another path)."""
    if given == own:
        return True
    found = [Path(name).expanduser() for name in (given, own)]
    return all(path.exists() for path in found) and found[0].resolve() == found[1].resolve()


def _same_methods(given: str, own: str) -> bool:
    return set(given.split(",")) == set(own.split(","))


def per_head_attention(scorer, text: str, tokens: list[str] | None = None):
    """Every head's attention of one review, (L, H, n, n), and its per-head statistics (L, H, k)
    as means, from one forward pass through the capture with all rows kept. ``tokens``: the model
    input the scorer's row was scored on (a head_tail cut keeps its tail), else plain truncation."""
    import torch

    from xai_ray.methods.heads import HeadCollector, position_masks
    from xai_ray.model.capture import forward_with_attention

    if tokens is not None:
        ids = torch.tensor([scorer.tokenizer.convert_tokens_to_ids(list(tokens))])  # (1, n)
        encoding = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    else:
        encoding = scorer.tokenizer([text], truncation=True, max_length=scorer.max_length, return_tensors="pt")
    n = int(encoding["input_ids"].shape[1])
    collector = HeadCollector([n], position_masks(encoding["input_ids"], scorer.tokenizer), [True], n)
    forward_with_attention(scorer.model, {k: v.to(scorer.device) for k, v in encoding.items()}, heads=collector)
    sums = collector.statistics()[0].numpy()  # (L, H, k)
    rows = np.array(
        [1 if s == "cls_entropy" else max(n - 1, 1) if s in ("to_prev", "to_next") else n for s in STATISTICS]
    )
    return collector.attention(0).double().numpy(), sums / rows


def word_level(tokens: list[str], index: list[int], words: list[str]):
    """Each position's display word: its word, or a word of its own for a special token."""
    display, labels, seen = [], [], {}
    for position, w in enumerate(index):
        key = ("word", w) if w >= 0 else ("special", position)
        if key not in seen:
            seen[key] = len(seen)
            labels.append(words[w] if w >= 0 else tokens[position])
        display.append(seen[key])
    return np.asarray(display, dtype=np.int64), labels


def encode(attention: np.ndarray) -> str:
    """Attention in [0, 1] as base64 of little-endian uint16 of sqrt(p): fine steps near 0,
    where most weights are, at two bytes a weight (the page squares them back)."""
    quantised = np.round(np.sqrt(np.clip(attention, 0.0, 1.0)) * 65535).astype("<u2")
    return base64.b64encode(quantised.tobytes()).decode("ascii")


def _scores_frame(row: dict, methods: list[str]) -> pd.DataFrame:
    """Per method, layer and word: the normalised [CLS] word score, as the words view holds it."""
    frames = []
    n_layers, words = row["n_layers"], row["words"]
    for method in methods:
        scores = np.asarray(row[f"word_scores_{method}"], dtype=np.float64).reshape(n_layers, len(words))
        layer, word_id = np.meshgrid(np.arange(1, n_layers + 1), np.arange(len(words)), indexing="ij")
        frames.append(
            pd.DataFrame(
                {
                    "method": method,
                    "layer": layer.ravel(),
                    "word_id": word_id.ravel(),
                    "word": np.asarray(words, dtype=object)[word_id.ravel()],
                    "score": scores.ravel(),
                }
            )
        )
    frame = pd.concat(frames, ignore_index=True)
    return frame[frame.score.notna()]


def build_page(
    row: dict,
    attention: np.ndarray,
    statistics: np.ndarray,
    info: dict,
    methods: list[str],
    source: str = "",
    true_label: str | None = None,
) -> str:
    import vl_convert

    from xai_ray.report.page import STYLE

    n_layers, n_heads = attention.shape[:2]
    display, word_labels = word_level(row["tokens"], row["word_index"], row["words"])
    word_attention = merge_attention(attention, display, len(word_labels))  # (L, H, W, W)
    data = {
        "layers": n_layers,
        "heads": n_heads,
        "tokens": row["tokens"],
        "words": word_labels,
        "token_attention": encode(attention),
        "word_attention": encode(word_attention),
    }
    words = _scores_frame(row, methods)
    main = "rollout" if "rollout" in methods else methods[0]
    labels = {int(k): v for k, v in info.get("labels", {}).items()}
    charts_ = [
        charts.layer_curves(
            _curves(words, main), f"Per-layer [CLS] score of the review's top words (by {main}, last layer)"
        ),
        charts.layer_heatmap(words, "Per-layer word scores"),
    ]
    grid = np.stack(np.meshgrid(np.arange(1, n_layers + 1), np.arange(1, n_heads + 1), indexing="ij"), -1)
    stats = pd.DataFrame(statistics.reshape(-1, len(STATISTICS)), columns=list(STATISTICS)).assign(
        layer=grid[..., 0].ravel(), head=grid[..., 1].ravel()
    )
    charts_.append(head_charts.head_heatmaps(stats, "This review's attention per head"))
    highlights = []
    for method in methods:
        mine = words[(words.method == method) & (words.layer == n_layers)].sort_values("word_id")
        highlights.append(
            f"<div class='hl'><h4>{html.escape(method)}, layer {n_layers}</h4>"
            f"<p>{highlight_html(row['text'], mine)}</p></div>"
        )
    probs = row["probs"]
    facts = [
        ("Review", row["doc_id"]),
        ("Model", info.get("name")),
        ("Fingerprint", (info.get("fingerprint") or "")[:16]),
        ("Predicted", f"{labels.get(row['pred'], row['pred'])} ({number(max(probs), '.3f')})"),
        ("True label", true_label or ("n/a" if row["label"] is None else labels.get(row["label"], row["label"]))),
        ("Tokens", f"{row['n_tokens']}{' (truncated)' if row['truncated'] else ''}"),
        ("Layers x heads", f"{n_layers} x {n_heads}"),
        ("Source", source or "text given on the command line"),
    ]
    table = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{text_html(str(v))}</td></tr>" for k, v in facts)
    bundle = vl_convert.javascript_bundle(vl_version=charts.vega_lite_version())
    embeds = "\n".join(
        f"vegaEmbed('#chart-{i}', {script_json(charts.spec(c))}, {{actions: false, renderer: 'svg'}}).catch(showError);"
        for i, c in enumerate(charts_)
    )
    title = text_html(f"xai-ray explain: {row['doc_id']}")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; img-src data:">
<title>{title}</title>
<style>{STYLE}{PAGE_STYLE}</style>
<script>{bundle}</script></head>
<body><h1>{title}</h1>
<section id='summary'><table class='facts'>{table}</table></section>
<section id='highlights'><h2>The review, each word shaded by its score</h2>
<p class='note'>{SHADE_NOTE}</p>
<div class='hl-grid'>{"".join(highlights)}</div></section>
<section id='attention'><h2>Every layer's and head's attention</h2>
<p class='note'>Pick a layer and a head (or the mean of the layer's heads), tokens or words (attention to a word:
the sum over its pieces; from a word: the mean). Head view: lines from each token on the left to the tokens it
attends to on the right, darker = more; hover or click a token to follow it alone. Model view: every head at once;
click one to pick it.</p>
<div id='controls'></div><div id='tokens' class='tokens'></div>
<div class='views'><div><canvas id='head-view'></canvas></div><div><div id='focus' class='focus'></div>
<canvas id='heatmap'></canvas><div id='cell' class='cell'></div></div></div>
<h3>Model view</h3><div id='model-view' class='model-view'></div></section>
<section id='curves'><h2>Per-layer [CLS] curves: {html.escape(", ".join(methods))}</h2>
<div class='chart' id='chart-0'></div><div class='chart' id='chart-1'></div></section>
<section id='head-statistics'><h2>This review's per-head statistics</h2>
<p class='note'>The corpus statistics of a run's report, for this review alone.</p>
<div class='chart' id='chart-2'></div></section>
<script type="application/json" id="xai-data">{script_json(data)}</script>
<script>
function showError(err) {{ console.error(err); }}
{embeds}
</script>
<script>{SCRIPT.read_text()}</script>
</body></html>
"""


PAGE_STYLE = (
    ".tokens{line-height:1.9;max-width:1200px;margin:.5em 0;overflow-wrap:anywhere} .tokens span{padding:1px 3px;margin:1px;"
    "border-radius:3px;cursor:pointer;background:#f3f3f3} .tokens span.on{background:#f58518;color:#fff}"
    ".views{display:flex;gap:2em;align-items:flex-start} .focus,.cell{font-size:.9em;color:#333;margin:.4em 0}"
    ".model-view{display:grid;gap:4px;align-items:center} .model-view canvas{cursor:pointer;"
    "border:2px solid transparent;image-rendering:pixelated} .model-view canvas.on{border-color:#f58518}"
    ".model-view .axis{font-size:.8em;color:#666;text-align:center} #controls label{margin-right:1.2em}"
)
