"""The report: self-contained, every chart present, and rendered for real in headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest

from xai_ray import pipeline
from xai_ray.config import resolve
from xai_ray.report import build_report
from xai_ray.scoring import Scorer

IMDB = Path(__file__).resolve().parents[2] / "shared" / "data" / "imdb" / "train.parquet"
INJECTION_ID = "<img src=x onerror=\"document.title='PWNED'\">"
INJECTION_TEXT = "<script>document.title='PWNED'</script></style> a fine film, " * 4
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def report_file(tmp_path_factory) -> Path:
    """A run written without Ray (the stages are callable alone): 6 real reviews + a hostile one."""
    root = tmp_path_factory.mktemp("report")
    cfg = resolve(None, {"data": str(IMDB), "limit": 6, "model": "minilm", "max_length": 64,
                         "store": str(root / "store"), "methods": "raw,rollout"})
    corpus = pipeline.read(cfg)
    texts = [INJECTION_TEXT, *corpus.text]
    ids = [INJECTION_ID, *corpus.doc_id]
    labels = [0 if corpus.label.iloc[0] == 1 else 1, *corpus.label]
    rows = Scorer({**cfg.to_dict(), "gpus_per_actor": 0})({"doc_id": ids, "text": texts, "label": labels})
    assert isinstance(rows, pa.Table)
    pipeline.write([rows], cfg, "r1", n_input=len(ids))
    return build_report(cfg.store, "r1", root / "report.html")


def test_report_is_self_contained(report_file):
    page = report_file.read_text()
    assert not re.search(r"""(src|href|url)\s*[=(]\s*["']?(https?:)?//""", page)
    n_charts = page.count("class='chart'")
    assert n_charts >= 5 and page.count("vegaEmbed('#chart-") == n_charts
    assert "Top 20 important words across all samples" in page
    # review text and ids are data: they never appear as raw markup
    assert "<img src=x" not in page and "<script>document.title" not in page


def test_report_size_does_not_carry_the_corpus(report_file):
    # The Vega bundle is ~0.9 MB; the data behind the charts is aggregates only.
    assert report_file.stat().st_size < 3_000_000


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (scripts/test.sh installs it)")
def test_report_renders_in_headless_chromium(report_file, tmp_path):
    net_log = tmp_path / "net.json"
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--no-first-run", "--disable-sync", "--disable-quic",
            f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
            "--virtual-time-budget=15000", f"--log-net-log={net_log}"]
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
    assert "<title>xai-ray report r1</title>" in html  # the injected handler never ran
    markup = re.sub(r"<script.*?</script>", "", html, flags=re.S)  # the inlined Vega bundle mentions <img
    assert "<img" not in markup and "PWNED</title>" not in markup
    assert "&lt;img src=x" in markup  # the hostile id is shown, as text
    # Requests the page made (the browser's own background chatter has no file:// isolation key).
    events = json.loads(net_log.read_text()).get("events", [])
    page_requests = [e["params"]["url"] for e in events
                     if "file://" in str(e.get("params", {}).get("network_isolation_key", "")) and "url" in e["params"]]
    assert [u for u in page_requests if not u.startswith("file:")] == []

    shot = tmp_path / "report.png"
    subprocess.run([*base, "--window-size=1200,2400", f"--screenshot={shot}", url], capture_output=True,
                   timeout=120)
    assert shot.stat().st_size > 10_000
