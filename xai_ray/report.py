"""One self-contained HTML report of a run: DuckDB aggregates in, Altair charts out.

Vega, Vega-Lite and vega-embed are inlined (from vl-convert), so the file opens with no
network. Charts are built from aggregates only, so the file's size does not grow with the
corpus. Every piece of text from the data is escaped: a review is data, never markup.
"""

from __future__ import annotations

import html
import json
import os
from pathlib import Path

import pandas as pd

from xai_ray import charts
from xai_ray.query import open_store, pick_run, run_named, topk

EXAMPLE_MIN_TOKENS = 20
CURVE_WORDS = 4


def build_report(store: str | Path, run_id: str | None, out: str | Path, k: int = 20) -> Path:
    """Write the report of ``run_id`` (default: newest run) to ``out``; returns its path."""
    con = open_store(store)
    run = pick_run(con, run_id)
    run_id = run["run_id"]
    manifest = json.loads(run["manifest"])
    labels = {int(key): value for key, value in manifest["model"].get("labels", {}).items()}
    methods = run["methods"].split(",")
    main_method = "rollout" if "rollout" in methods else methods[0]
    layer = int(run["n_layers"])
    summary = run_named(con, "summary", run_id=run_id).iloc[0].to_dict()

    # Words seen once or twice dominate a mean; ask for a few occurrences, more on big corpora.
    min_count = int(min(max(summary["n_docs"] // 20, 2), 20))
    sections: list[tuple[str, str, list]] = []
    headline = topk(con, run_id, main_method, layer, k=k, min_count=min_count)
    subtitle = [
        f"Average positive probability: {summary['mean_prob_pos']:.2f}, "
        f"average negative probability: {summary['mean_prob_neg']:.2f}",
        f"Overall accuracy: {_percent(summary['accuracy'])} over {int(summary['n_labelled'])} labelled reviews",
    ]
    sections.append(("Top words across all reviews", "", [charts.topk_bar(
        headline, f"Top {k} important words across all samples ({main_method}, layer {layer})", subtitle)]))

    per_method = pd.concat([topk(con, run_id, m, layer, k=k, min_count=min_count).assign(method=m) for m in methods])
    sections.append(("Top words per method", f"Layer {layer}; words seen at least {min_count} times; "
                     "special tokens excluded, scores renormalised.",
                     [charts.topk_facets(per_method, "method", f"Top {k} words per method (layer {layer})")]))

    by_pred = topk(con, run_id, main_method, layer, k=k, by="pred", min_count=min_count)
    by_pred["predicted"] = by_pred["group"].map(lambda g: labels.get(int(g), g) if str(g).isdigit() else g)
    sections.append(("Top words per predicted class", "", [
        charts.topk_facets(by_pred, "predicted", f"Top {k} words per predicted class ({main_method})")]))

    confusion = run_named(con, "confusion", run_id=run_id)
    if not confusion.empty:
        sections.append(("Predictions", "", [charts.confusion(confusion, labels)]))

    examples = run_named(con, "examples", run_id=run_id, min_tokens=EXAMPLE_MIN_TOKENS)
    example_charts = []
    for example in examples.itertuples():
        words = run_named(con, "layer_words", run_id=run_id, doc_id=example.doc_id)
        verdict = "correct" if example.correct else "wrong"
        title = (f"Review {example.doc_id}: true {labels.get(int(example.label), example.label)}, "
                 f"predicted {labels.get(int(example.pred), example.pred)} ({verdict}, P(pos)={example.prob_pos:.2f})")
        example_charts.append(charts.layer_curves(_curves(words, main_method), title))
        example_charts.append(charts.layer_heatmap(words, "Per-layer word scores, " + example.doc_id))
    if example_charts:
        sections.append(("Per-layer [CLS] scores on example reviews",
                         "Raw attention fades towards uniform in deep layers; rollout keeps the signal.",
                         example_charts))
    page = _page(run, manifest, summary, sections)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    temporary = out.with_name(out.name + ".tmp")
    temporary.write_text(page, encoding="utf-8")
    os.replace(temporary, out)
    return out


def _curves(words: pd.DataFrame, main_method: str) -> pd.DataFrame:
    """The review's top words by the main method's last layer, followed through every layer."""
    last = words[(words.method == main_method) & (words.layer == words.layer.max())]
    top_ids = last.nlargest(CURVE_WORDS, "score")["word_id"]
    chosen = words[words.word_id.isin(top_ids)]
    return chosen.assign(word=chosen["word_id"].map("{:03d} ".format) + chosen["word"])


def _percent(value) -> str:
    return "n/a" if value is None or pd.isna(value) else f"{value:.1%}"


def _script_json(spec: dict) -> str:
    """JSON that is safe inside <script>: no '<', '>' or '&' can close the tag or open a comment."""
    text = json.dumps(spec)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _page(run, manifest, summary, sections) -> str:
    import vl_convert
    from altair.utils._importers import vl_version_for_vl_convert

    bundle = vl_convert.javascript_bundle(vl_version=vl_version_for_vl_convert())
    facts = [
        ("Run", run["run_id"]), ("Created", run["created_at"]), ("Model", run["model"]),
        ("Fingerprint", (run["model_fingerprint"] or "")[:16]), ("Data", run["data"]),
        ("Methods", run["methods"]), ("Documents", summary["n_docs"]), ("Errors", summary["n_errors"]),
        ("Truncated", summary["n_truncated"]), ("Accuracy", _percent(summary["accuracy"])),
        ("Mean P(positive)", f"{summary['mean_prob_pos']:.3f}"),
        ("Seconds", manifest.get("timings", {}).get("total_s")),
        ("Docs/s", manifest.get("timings", {}).get("docs_per_s")),
    ]
    rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>" for k, v in facts)
    body, scripts, index = [], [], 0
    for heading, note, chart_list in sections:
        body.append(f"<section><h2>{html.escape(heading)}</h2>")
        if note:
            body.append(f"<p class='note'>{html.escape(note)}</p>")
        for chart in chart_list:
            body.append(f"<div class='chart' id='chart-{index}'></div>")
            scripts.append(f"vegaEmbed('#chart-{index}', {_script_json(chart.to_dict())}, "
                           "{actions: false, renderer: 'svg'}).catch(showError);")
            index += 1
        body.append("</section>")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; img-src data:">
<title>xai-ray report {html.escape(str(run['run_id']))}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;color:#222}} table{{border-collapse:collapse}}
th,td{{text-align:left;padding:2px 12px;border-bottom:1px solid #eee}} .note{{color:#666}}
section{{margin:2em 0}} .chart{{margin:1em 0}}</style>
<script>{bundle}</script></head>
<body><h1>xai-ray report</h1><table class="facts">{rows}</table>
{''.join(body)}
<script>
function showError(err) {{ console.error(err); }}
{chr(10).join(scripts)}
</script></body></html>
"""
