"""The report: self-contained, every section and chart present, review text shown as text,
definitions and chart export, and rendered for real in headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet  # noqa: F401  (pa.parquet)
import pytest
import yaml
from test_charts import DOCS, write_run  # the tiny hand-written store of the SQL tests

from xai_ray import cli, pipeline
from xai_ray.config import ConfigError, resolve
from xai_ray.data.corpus import read_corpus
from xai_ray.query.connection import open_store
from xai_ray.report.context import has_relation
from xai_ray.report.definition import DEFAULT_DEFINITION, DEFAULTS, load_definition
from xai_ray.report.page import build_report, export_charts
from xai_ray.report.sections import highlight_html
from xai_ray.scoring.actor import Scorer

IMDB = Path(__file__).resolve().parents[2] / "shared" / "data" / "imdb" / "train.parquet"
INJECTION_ID = "<img src=x onerror=\"document.title='PWNED'\">"
# 49 tokens: at least the examples' 20, fewer than the real reviews cut at 64, so it is the
# shortest of its (label, correct) group and certainly one of the highlighted examples.
INJECTION_TEXT = (
    "<script>document.title='PWNED'</script><img src=x onerror=\"document.title='PWNED'\"></style> a fine film, "
)
SECTIONS = ["summary", "headline", "explorer", "per_method", "per_class", "layers", "highlights", "agreement"]


@pytest.fixture(scope="module")
def report_file(tmp_path_factory) -> Path:
    """A run written without Ray (the stages are callable alone): 6 real reviews + a hostile one."""
    root = tmp_path_factory.mktemp("report")
    cfg = resolve(
        None,
        {
            "data": str(IMDB),
            "limit": 6,
            "model": "minilm",
            "max_length": 64,
            "store": str(root / "store"),
            "methods": "raw,rollout",
        },
    )
    corpus = read_corpus(cfg.data, cfg.split, limit=cfg.limit, seed=cfg.seed)
    texts = [INJECTION_TEXT, *corpus.text]
    ids = [INJECTION_ID, *corpus.doc_id]
    labels = [0 if corpus.label.iloc[0] == 1 else 1, *corpus.label]
    rows = Scorer({**cfg.to_dict(), "gpus_per_actor": 0})({"doc_id": ids, "text": texts, "label": labels})
    assert isinstance(rows, pa.Table)
    pipeline.write([rows], cfg, "r1", n_input=len(ids))
    return build_report(cfg.store, "r1", root / "report.html")


def section(page: str, key: str) -> str:
    found = re.search(rf"<section id='{key}'>(.*?)</section>", page, re.S)
    assert found, f"no section {key}"
    return found.group(1)


def test_report_is_self_contained(report_file):
    page = report_file.read_text()
    assert not re.search(r"""(src|href|url)\s*[=(]\s*["']?(https?:)?//""", page)
    n_charts = page.count("class='chart'")
    assert n_charts >= 10 and page.count("vegaEmbed('#chart-") == n_charts
    assert "Top 20 important words across all samples" in page and "Overall accuracy" in page
    for key in SECTIONS:
        section(page, key)
    # review text and ids are data: they never appear as raw markup
    assert "<img src=x" not in page and "<script>document.title" not in page


def test_every_chart_the_report_builds_is_valid_vega_lite(report_file):
    """The report builds its charts without altair's validation (charts.unchecked); here every one
    of them is validated against the Vega-Lite schema, and the page holds exactly their specs."""
    import altair as alt

    from xai_ray.report import charts
    from xai_ray.report.blocks import Fragment
    from xai_ray.report.context import context
    from xai_ray.report.page import build_sections

    store = report_file.parent / "store"
    sections = build_sections(context(store, "r1", load_definition(None), None))
    built = [item for s in sections for item in s.items if not isinstance(item, Fragment)]
    assert len(built) >= len(SECTIONS)
    with alt.data_transformers.disable_max_rows():
        for chart in built:
            assert chart.to_dict(validate=True) == charts.spec(chart)  # raises on a spec Vega-Lite refuses
    assert report_file.read_text().count("vegaEmbed('#chart-") == len(built)
    broken = alt.Chart(pd.DataFrame({"x": [1]})).mark_bar().encode(x="x:Q")
    broken["mark"] = {"type": "no-such-mark"}
    with pytest.raises(Exception, match="no-such-mark"):  # the check above can fail
        broken.to_dict(validate=True)


def test_report_size_does_not_carry_the_corpus(report_file):
    # The Vega bundle is ~0.9 MB; the data behind the charts is aggregates only.
    assert report_file.stat().st_size < 3_000_000


def test_hostile_review_is_highlighted_as_text(report_file):
    shown = section(report_file.read_text(), "highlights")
    assert "<script" not in shown and "<img" not in shown and "</style" not in shown
    assert shown.count("<div class='example'>") >= 3 and "<span class='w" in shown
    assert "<h3>Review &lt;img src=x onerror=" in shown  # the hostile review is one of the examples
    text = re.sub(r"</?span[^>]*>", "", shown)  # each word is a shaded span; read the text between
    assert "&lt;script&gt;document.title=&#x27;PWNED&#x27;&lt;/script&gt;" in text
    assert "&lt;img src=x onerror=&quot;document.title=&#x27;PWNED&#x27;&quot;&gt;&lt;/style&gt;" in text


def test_highlight_html_keeps_gaps_escapes_words_and_shades_by_score():
    text = "Fine  <b>film</b>!\nThe rest was cut"
    words = pd.DataFrame(
        {"word": ["Fine", "<b>", "film", "</b>", "!", "missing"], "score": [0.5, 0.0, 0.25, 0.0, float("nan"), 0.1]}
    )
    got = highlight_html(text, words)
    assert got.startswith("<span class='w9' title='0.5000'>Fine</span>  <span class='w0' title='0.0000'>&lt;b&gt;")
    assert "<span class='w5' title='0.2500'>film</span>" in got  # half the top score
    assert "<span class='w0' title='n/a'>!</span>" in got
    assert " <span class='w2' title='0.1000'>missing</span>" in got  # not in the text: shown alone
    assert got.endswith("<span class='cut'>\nThe rest was cut</span>")  # past max_length
    assert "<b>" not in got


def test_highlight_html_shades_a_signed_methods_evidence_against_the_class_by_its_size_in_blue():
    """lrp's "good" at -0.944 was 94% of the review's evidence and came out unshaded (class w-9),
    while "was" at +0.036 took the darkest shade: shades follow |score|, below 0 in blue (n)."""
    words = pd.DataFrame({"word": ["the", "movie", "was", "good"], "score": [0.01, -0.01, 0.036, -0.944]})
    got = highlight_html("the movie was good", words)
    assert "<span class='n9' title='-0.9440'>good</span>" in got
    assert "<span class='w0' title='0.0360'>was</span>" in got  # 0.036 / 0.944 of the largest: the lightest
    assert "<span class='n0' title='-0.0100'>movie</span>" in got
    assert "w-" not in got and "n-" not in got
    from xai_ray.report.page import SHADE_CSS

    assert ".n9{background:rgba(76,120,168,0.80)}" in SHADE_CSS and ".w9{" in SHADE_CSS


def test_highlight_html_shows_control_characters_as_pictures():
    text = "bad\x00movie \x1b[2Jok\x7f\x85 end\tnow\n"
    words = pd.DataFrame({"word": ["bad\x00movie", "\x1b[2Jok\x7f\x85", "end", "now"], "score": [1.0, 0.5, 0.2, 0.1]})
    got = highlight_html(text, words)
    assert ">bad\u2400movie</span>" in got  # NUL: a browser would drop it and join the words
    assert ">\u241b[2Jok\u2421\\x85</span>" in got  # ESC, DEL, a C1 control
    assert "end</span>\t<span" in got  # tabs and line breaks stay text
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", got)


@pytest.fixture(scope="module")
def tiny_store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tiny-report")
    # d1 predicted positive, d2 negative; 'film' and 'good' occur twice
    words = {
        ("raw", 1): [
            ("d1", 0, "good", 0.5),
            ("d1", 1, "film", 0.3),
            ("d1", 2, "good", 0.2),
            ("d2", 0, "bad", 0.7),
            ("d2", 1, "film", 0.3),
        ],
        ("raw", 2): [
            ("d1", 0, "good", 0.3),
            ("d1", 1, "film", 0.6),
            ("d1", 2, "good", 0.1),
            ("d2", 0, "bad", 0.6),
            ("d2", 1, "film", 0.4),
        ],
        ("rollout", 2): [
            ("d1", 0, "good", 0.5),
            ("d1", 1, "film", 0.4),
            ("d1", 2, "good", 0.1),
            ("d2", 0, "bad", 0.2),
            ("d2", 1, "film", 0.8),
        ],
    }
    write_run(root, "two", DOCS[:2], words)
    # One method, no labels: a run that lacks the data of several sections.
    write_run(
        root,
        "bare",
        [{**d, "label": None} for d in DOCS[:2]],
        {("raw", 1): words[("raw", 1)]},
        created_at="2026-01-02T00:00:00",
    )
    return root


def test_definition_defaults_are_the_yaml_file():
    assert yaml.safe_load(DEFAULT_DEFINITION.read_text()) == DEFAULTS
    assert load_definition() == DEFAULTS


@pytest.mark.parametrize(
    "given, message",
    [
        ({"colour": "red"}, "unknown key 'colour'"),
        ({"sections": ["headline", "pie"]}, "unknown sections"),
        ({"examples": {"pick": "random"}}, "examples.pick"),
        ({"k": 0}, "k must be"),
        ({"examples": {"count": 3}}, "'examples' takes the keys"),
        ({"min_count": "some"}, "min_count"),
    ],
)
def test_definition_mistakes_are_named(tmp_path, given, message):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(given))
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_definition(path)


def test_definition_chooses_sections_and_k(tiny_store, tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("k: 1\nmin_count: 1\nsections: [agreement, headline]\n")
    page = build_report(tiny_store, "two", tmp_path / "r.html", definition=path).read_text()
    assert re.findall(r"<section id='(\w+)'>", page) == ["agreement", "headline"]
    assert "Top 1 important words across all samples (rollout, layer 2)" in page


def test_a_highlight_layer_beyond_the_models_is_refused(tiny_store, tmp_path):
    """`highlight: {layer: 99}` gave every example "not scored at this layer" and exit 0."""
    path = tmp_path / "mine.yaml"
    path.write_text("highlight: {layer: 3}\nsections: [highlights]\n")
    with pytest.raises(ConfigError, match=r"highlight.layer is 3, but run 'two''s model has 2 layers"):
        build_report(tiny_store, "two", tmp_path / "r.html", definition=path)
    assert not (tmp_path / "r.html").exists()
    path.write_text("highlight: {layer: 2}\nsections: [highlights]\n")
    assert (
        "<section id='highlights'>" in build_report(tiny_store, "two", tmp_path / "r.html", definition=path).read_text()
    )


def test_sections_without_data_are_left_out(tiny_store, tmp_path):
    con = open_store(tiny_store)
    assert has_relation(con, "words") and has_relation(con, "heads") and not has_relation(con, "nothing")
    page = build_report(tiny_store, "bare", tmp_path / "bare.html").read_text()
    # one method: no per-method panels, no agreement; no labels: no confusion matrix, no examples; each
    # predicted class holds one review, so no word there reaches the default support of 2 reviews
    assert re.findall(r"<section id='(\w+)'>", page) == ["summary", "headline", "explorer"]
    assert section(page, "summary").count("class='chart'") == 0


def test_a_chart_vega_cannot_draw_is_one_sentence(tiny_store, tmp_path, monkeypatch):
    """vl-convert raises ValueError with Vega's own message when a chart fails (a class name Vega's
    expression parser refused did): the export named it in a traceback, now in one sentence."""
    import vl_convert

    from xai_ray.report.outputs import OutputError

    def fails(*args, **kwargs):
        raise ValueError("Vega-Lite to SVG conversion failed:\nError: Unexpected token ILLEGAL\n    at Au (x.js)")

    monkeypatch.setattr(vl_convert, "vegalite_to_svg", fails)
    with pytest.raises(OutputError) as raised:
        export_charts(tiny_store, "two", tmp_path / "svg", "svg")
    assert str(raised.value) == (
        "chart 01-summary.svg could not be drawn as svg: Vega-Lite to SVG conversion failed: "
        "Error: Unexpected token ILLEGAL"
    )


def test_charts_export_as_svg_and_png(tiny_store, tmp_path):
    svgs = export_charts(
        tiny_store, "two", tmp_path / "svg", "svg", definition={**DEFAULTS, "min_count": 1, "min_docs": 1}
    )
    page = build_report(
        tiny_store, "two", tmp_path / "r.html", definition={**DEFAULTS, "min_count": 1, "min_docs": 1}
    ).read_text()
    assert len(svgs) == page.count("class='chart'") and svgs[0].name == "01-summary.svg"
    assert all(path.read_text().lstrip().startswith("<svg") for path in svgs)
    out = tmp_path / "cli" / "report.html"
    definition = tmp_path / "d.yaml"
    definition.write_text("sections: [headline, contrast]\nmin_count: 1\nmin_docs: 1\n")
    assert (
        cli.main(
            [
                "report",
                "--store",
                str(tiny_store),
                "--run",
                "two",
                "--out",
                str(out),
                "--format",
                "png",
                "--definition",
                str(definition),
            ]
        )
        == 0
    )
    pngs = sorted((tmp_path / "cli" / "report-charts").iterdir())
    assert [p.name for p in pngs] == ["01-headline.png", "02-contrast.png"] and out.is_file()
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    assert cli.main(["report", "--store", str(tiny_store), "--out", str(out), "--charts-dir", str(tmp_path)]) == 2


@pytest.mark.browser
def test_report_renders_in_headless_chromium(report_file, tmp_path, chromium):
    net_log = tmp_path / "net.json"
    base = chromium(tmp_path, net_log)
    url = report_file.as_uri()
    dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line and "source: file://" in line]
    assert console == [], console
    html = dom.stdout
    pieces = re.split(r'<div class="chart[^"]*" id="chart-\d+"', html)[1:]
    charts = [piece.split("</section>")[0] for piece in pieces]
    n_charts = report_file.read_text().count("class='chart'")
    assert len(charts) == n_charts
    assert all("<svg" in chart and "<path" in chart for chart in charts), "a chart did not render"
    explorer = section(html.replace('"', "'"), "explorer")
    assert "<select" in explorer and explorer.count("type='range'") == 2 and "type='radio'" in explorer
    assert "<title>xai-ray report r1</title>" in html  # the injected handler never ran
    markup = re.sub(r"<script.*?</script>", "", html, flags=re.S)  # the inlined Vega bundle mentions <img
    assert "<img" not in markup and "PWNED</title>" not in markup
    assert "&lt;img src=x" in markup  # the hostile id is shown, as text
    text = re.sub(r"</?span[^>]*>", "", section(markup.replace('"', "'"), "highlights"))
    assert "&lt;script&gt;document.title='PWNED'&lt;/script&gt;&lt;img src=x" in text
    # Requests the page made (the browser's own background chatter has no file:// isolation key).
    events = json.loads(net_log.read_text()).get("events", [])
    page_requests = [
        e["params"]["url"]
        for e in events
        if "file://" in str(e.get("params", {}).get("network_isolation_key", "")) and "url" in e["params"]
    ]
    assert [u for u in page_requests if not u.startswith("file:")] == []

    shot = tmp_path / "report.png"
    subprocess.run([*base, "--window-size=1300,3000", f"--screenshot={shot}", url], capture_output=True, timeout=120)
    assert shot.stat().st_size > 10_000
    if os.environ.get("XAI_RAY_REPORT_SHOT"):  # keep a screenshot to look at
        shutil.copy(shot, os.environ["XAI_RAY_REPORT_SHOT"])


def test_aggregate_stage_keeps_what_the_report_reads(report_file):
    """The pipeline's aggregate stage keeps the corpus-wide queries beside the run; the report
    then reads them instead of scanning, and the page it builds is the same."""
    from xai_ray.query.connection import open_store, run_named
    from xai_ray.report.aggregates import keep_aggregates
    from xai_ray.store.aggregates import RUN_KEY, read_aggregate

    store = report_file.parent / "store"
    live_page = build_report(store, "r1", report_file.parent / "live.html").read_text()
    kept = keep_aggregates(store, "r1")
    assert {path.stem for path in kept} >= {"report_topk_all", "report_agreement", "report_contrast"}
    con = open_store(store)
    for path in kept:
        tag = json.loads(pa.parquet.read_schema(path).metadata[b"xai_ray.params"])
        frame = read_aggregate(store, "r1", path.stem, tag)
        assert tag.pop(RUN_KEY)["run_id"] == "r1"  # the tag names the run it was computed from
        params = {k: v for k, v in tag.items() if k != "sql"}  # the tag holds the query text's digest too
        expected = run_named(con, path.stem, run_id="r1", **params)
        pd.testing.assert_frame_equal(frame.reset_index(drop=True), expected.reset_index(drop=True), check_dtype=False)
        assert read_aggregate(store, "r1", path.stem, {**tag, "k": -1}) is None  # other parameters: recompute
        assert read_aggregate(store, "r1", path.stem, {**tag, "sql": "0" * 16}) is None  # another query: recompute
    kept_page = build_report(store, "r1", report_file.parent / "kept.html").read_text()
    assert len(_charts_json(live_page)) >= 5 and _charts_json(kept_page) == _charts_json(live_page)


def _charts_json(page: str) -> list[str]:
    return re.findall(r"vegaEmbed\('#chart-\d+', (.*?), \{", page)


def test_the_aggregate_plan_is_what_the_sections_read(report_file):
    """The plan is data derived from the definition; it must name exactly the kept queries (and
    parameters) that building the sections asks for, so the report never rescans a run."""
    from xai_ray.report.aggregates import planned
    from xai_ray.report.context import KEPT, context
    from xai_ray.report.definition import load_definition
    from xai_ray.report.page import build_sections

    store = report_file.parent / "store"
    ctx = context(store, "r1", load_definition(), None)
    ctx.store = None  # compute everything from the views: the cache then records every query asked
    build_sections(ctx)
    asked = {(name, params) for name, params in ctx.cache if name in KEPT}
    plan = {
        (name, tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in params.items())))
        for name, params in planned(ctx)
    }
    assert plan == asked and len(plan) == 3


def test_keeping_aggregates_imports_no_chart_library(report_file):
    code = (
        "import sys; from xai_ray.report.aggregates import keep_aggregates; "
        f"kept = keep_aggregates({str(report_file.parent / 'store')!r}, 'r1'); "
        "assert kept, 'nothing kept'; "
        "assert 'altair' not in sys.modules and 'xai_ray.report.charts' not in sys.modules, sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_inlined_vega_bundle_is_built_once_per_version_and_kept_in_the_user_cache(tmp_path, monkeypatch):
    import vl_convert

    from xai_ray.report import page

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first = page.vega_bundle()
    kept = list((tmp_path / "cache" / "xai-ray").glob("vega-bundle-*.js"))
    assert len(kept) == 1 and vl_convert.__version__ in kept[0].name and kept[0].read_text() == first
    assert "vega-lite" in first.lower()

    def never(**_):
        raise AssertionError("the bundle was built again")

    monkeypatch.setattr(vl_convert, "javascript_bundle", never)
    assert page.vega_bundle() == first  # read back, not rebuilt

    # a cache folder that cannot be made (a file in its way): built each time, the report still works
    blocked = tmp_path / "blocked"
    blocked.write_text("a file, not a folder")
    monkeypatch.undo()  # vl-convert itself again
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    assert page.vega_bundle() == first and blocked.read_text() == "a file, not a folder"


@pytest.mark.parametrize(
    "text,says",
    [
        ("examples: {max_words: abc}\n", "examples.max_words must be a whole number >= 1, got 'abc'"),
        ("examples: {max_words: -5}\n", "examples.max_words must be a whole number >= 1"),
        ("examples: {min_tokens: x}\n", "examples.min_tokens must be a whole number >= 0"),
        ("agreement: {bins: 0}\n", "agreement.bins must be a whole number >= 1"),
        ("agreement: {bins: 1.5}\n", "agreement.bins must be a whole number >= 1"),
        ("agreement: {max_docs: -1}\n", "agreement.max_docs must be a whole number >= 1"),
        ("highlight: {layer: 0}\n", "highlight.layer must be 'last' or a layer number"),
        ("highlight: {layer: true}\n", "highlight.layer must be 'last' or a layer number"),
        ("sections: summary\n", "sections must be a list of section names"),
        ("sections: [summary, summary, headline]\n", "sections ['summary'] are listed twice"),
    ],
)
def test_a_definition_value_of_the_wrong_type_or_range_is_one_sentence(tmp_path, text, says):
    """Each was a traceback, a "damaged file?" message from DuckDB, an empty chart or a broken
    page navigation."""
    from xai_ray.config import ConfigError
    from xai_ray.report.definition import load_definition

    path = tmp_path / "d.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_definition(path)
    assert says in str(caught.value) and "\n" not in str(caught.value)
