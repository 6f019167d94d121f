"""One self-contained HTML report of a run: DuckDB aggregates in, Altair charts out.

Vega, Vega-Lite and vega-embed are inlined (from vl-convert), so the file opens with no
network. Charts are built from aggregates only (top-k per slice, histograms, a few example
reviews), so the file's size does not grow with the corpus. Every piece of text from the data
is escaped: a review is data, never markup. What the report shows is read from a report
definition (``reports/default.yaml``; ``--definition PATH``); the sections themselves live in
``report.sections``. ``export_charts`` writes the same charts as PNG or SVG files for slides.
"""

from __future__ import annotations

import html
import os
from pathlib import Path

from xai_ray.config import ConfigError
from xai_ray.report import charts
from xai_ray.report.blocks import Fragment, Section
from xai_ray.report.context import Context, context
from xai_ray.report.definition import load_definition
from xai_ray.report.outputs import OutputError, check_target, script_json, write_page
from xai_ray.report.sections import BUILDERS
from xai_ray.store import layout

FORMATS = ("png", "svg")


def build_sections(ctx: Context, what: str = "report") -> list[Section]:
    """The definition's sections in order, skipping those whose data the run lacks."""
    from xai_ray.progress import Progress

    sections = []
    with Progress(len(ctx.definition["sections"]), what, "sections") as bar, charts.unchecked():
        for name in ctx.definition["sections"]:
            section = BUILDERS[name](ctx)
            if section is not None:
                sections.append(section)
            bar.update(1)
    return sections


def build_report(
    store: str | Path,
    run_id: str | None,
    out: str | Path,
    k: int | None = None,
    definition: str | Path | dict | None = None,
    charts_dir: str | Path | None = None,
    fmt: str = "png",
    con=None,
    extra: dict | None = None,
    option: str = "--out",
) -> Path:
    """Write the report of ``run_id`` (default: newest run) to ``out``; returns its path. With
    ``charts_dir``, also write every chart there as ``fmt`` (png or svg) from the same queries.
    ``con`` and ``extra``: see ``context``; ``option``: what a failed write names ``out`` as (the
    flag that gave it, or what the run's own report is)."""
    out = check_target(out, store=store)  # before the work: a folder, a device, a link or a store file is refused
    if charts_dir is not None and Path(os.path.abspath(charts_dir)) == Path(os.path.abspath(out)):
        raise ConfigError(f"--charts-dir and --out both name {str(out)!r}; the charts need a folder of their own")
    if charts_dir is not None and Path(charts_dir).exists() and not Path(charts_dir).is_dir():
        raise ConfigError(f"--charts-dir {str(charts_dir)!r} is not a folder; name a folder for the chart files")
    if charts_dir is not None:
        _check_charts_dir(store, charts_dir)
    if not isinstance(definition, dict):
        definition = load_definition(definition)
    ctx = context(store, run_id, definition, k, con=con, extra=extra)
    sections = build_sections(ctx)
    write_page(out, _page(ctx, sections), option)
    if charts_dir is not None:
        _write_charts(sections, Path(charts_dir), fmt)
    return out


def export_charts(
    store: str | Path,
    run_id: str | None,
    folder: str | Path,
    fmt: str = "png",
    k: int | None = None,
    definition: str | Path | dict | None = None,
) -> list[Path]:
    """Every chart of the report as ``NN-section[-i].png|svg`` in ``folder`` (for slides, e-mail);
    interactive charts are drawn in their default view. Returns the files in report order."""
    _check_charts_dir(store, folder)
    if not isinstance(definition, dict):
        definition = load_definition(definition)
    return _write_charts(build_sections(context(store, run_id, definition, k)), Path(folder), fmt)


def _check_charts_dir(store: str | Path, folder: str | Path) -> None:
    """Refuse, before the work, a chart folder among the store's own files (``--out`` is refused
    there already): charts were written into ``runs/`` and into a run's Parquet ``docs/`` folder."""
    if layout.is_page_of(store, Path(folder) / "chart.png") is False:
        raise OutputError(
            f"--charts-dir {str(folder)!r} is inside store {str(store)!r}, whose files are its data; "
            "write the charts outside the store (with --out inside a run, name --charts-dir too)"
        )


def _write_charts(sections: list[Section], folder: Path, fmt: str) -> list[Path]:
    import vl_convert

    if fmt not in FORMATS:
        raise ConfigError(f"chart format must be one of {', '.join(FORMATS)}; got {fmt!r}")
    folder.mkdir(parents=True, exist_ok=True)
    version, written, number = charts.vega_lite_version(), [], 0
    for section in sections:
        chart_items = [item for item in section.items if not isinstance(item, Fragment)]
        for i, chart in enumerate(chart_items):
            number += 1
            path = folder / f"{number:02d}-{section.key}{f'-{i + 1}' if len(chart_items) > 1 else ''}.{fmt}"
            # allowed_base_urls=[]: the specs carry their data inline, so nothing is ever fetched
            try:
                if fmt == "png":
                    image = vl_convert.vegalite_to_png(
                        charts.spec(chart), vl_version=version, scale=2, allowed_base_urls=[]
                    )
                else:
                    image = vl_convert.vegalite_to_svg(charts.spec(chart), vl_version=version, allowed_base_urls=[])
            except ValueError as err:  # Vega failed on the chart: what it said, not vl-convert's traceback
                said = " ".join(line.strip() for line in str(err).splitlines()[:2])
                raise OutputError(f"chart {path.name} could not be drawn as {fmt}: {said}") from None
            written.append(write_page(path, image, option="chart file"))  # never through a planted link
    return written


# Highlight shades w0..w9: orange at growing opacity, light enough for the text to stay legible;
# n0..n9 the same in blue.
SHADE_CSS = "".join(
    f".w{i}{{background:rgba(245,133,24,{i / 9 * 0.8:.2f})}}.n{i}{{background:rgba(76,120,168,{i / 9 * 0.8:.2f})}}"
    for i in range(10)
)  # n: a signed method's score below 0 (evidence against the explained class), in blue
STYLE = (
    "body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1400px}"
    "table{border-collapse:collapse} th,td{text-align:left;padding:2px 12px;border-bottom:1px solid #eee}"
    ".note{color:#666;max-width:60em} section{margin:2em 0} .chart{margin:1em 0} nav a{margin-right:1em}"
    ".hl-grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(320px,1fr));gap:1.5em}"
    # a word of thousands of letters wraps inside its column (it ran through its neighbours' columns)
    ".hl{min-width:0} .hl p{line-height:1.7;white-space:pre-wrap;overflow-wrap:anywhere}"
    " .hl span{border-radius:2px} .cut{color:#999}"
    "h3{font-size:1em;margin-top:1.5em} h4{margin:.2em 0;color:#555}"
    "#summary{display:flex;flex-wrap:wrap;gap:1em 4em;align-items:flex-start} #summary h2{flex-basis:100%}" + SHADE_CSS
)


def vega_bundle() -> str:
    """Vega, Vega-Lite and vega-embed as one script, inlined so the page needs no network.
    vl-convert builds it in about a second, the same for the same versions: kept in the user's
    cache folder ($XDG_CACHE_HOME or ~/.cache, ``xai-ray/``) under both versions, and built again
    where that folder cannot be written."""
    import vl_convert

    from xai_ray.store.files import write_atomically

    version = charts.vega_lite_version()
    home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    cached = Path(home) / "xai-ray" / f"vega-bundle-{vl_convert.__version__}-{version}.js"
    try:
        return cached.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        pass
    bundle = vl_convert.javascript_bundle(vl_version=version)
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(cached, bundle, durable=False)
    except OSError:  # a read-only home: the next report builds it again
        pass
    return bundle


def _page(ctx: Context, sections: list[Section]) -> str:
    bundle = vega_bundle()
    nav = "".join(f"<a href='#{s.key}'>{html.escape(s.title)}</a>" for s in sections)
    body, scripts, index = [], [], 0
    for section in sections:
        body.append(f"<section id='{section.key}'><h2>{html.escape(section.title)}</h2>")
        if section.note:
            body.append(f"<p class='note'>{html.escape(section.note)}</p>")
        for item in section.items:
            if isinstance(item, Fragment):
                body.append(item.html)
                continue
            body.append(f"<div class='chart' id='chart-{index}'></div>")
            scripts.append(
                f"vegaEmbed('#chart-{index}', {script_json(charts.spec(item))}, "
                "{actions: false, renderer: 'svg'}).catch(showError);"
            )
            index += 1
        body.append("</section>")
    title = html.escape(f"xai-ray report {ctx.run_id}")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; img-src data:">
<title>{title}</title>
<style>{STYLE}</style>
<script>{bundle}</script></head>
<body><h1>{title}</h1><nav>{nav}</nav>
{"".join(body)}
<script>
function showError(err) {{ console.error(err); }}
{chr(10).join(scripts)}
</script></body></html>
"""
