"""examples/quickstart.ipynb runs end to end in a real Jupyter kernel (nbclient), on the packaged
MiniLM weights and a slice of the shared IMDB file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
NOTEBOOK = EXAMPLES / "quickstart.ipynb"
DEFAULT_DATA = EXAMPLES / "../../shared/data/imdb/train.parquet"  # a fresh clone with shared/ beside it


def _imdb() -> Path | None:
    """The notebook's own relative path, or the shared folder found further up (a worktree nested deeper)."""
    if DEFAULT_DATA.is_file():
        return None
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "shared" / "data" / "imdb" / "train.parquet"
        if candidate.is_file():
            return candidate
    pytest.skip("needs the IMDB parquet in shared/data beside the repository")


@pytest.mark.slow
@pytest.mark.ray
def test_quickstart_notebook_runs_in_a_kernel(monkeypatch, tmp_path):
    import nbformat
    from nbclient import NotebookClient

    found = _imdb()
    if found is not None:
        monkeypatch.setenv("XAI_RAY_DATA", str(found))
    monkeypatch.setenv("XAI_RAY_CACHE", str(tmp_path / "cache"))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    assert not any(cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code")  # kept clean
    client = NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(EXAMPLES)}}
    )
    client.execute()  # raises CellExecutionError at the first failing cell

    def html_of(source_start: str) -> str:
        (cell,) = [
            c
            for c in notebook.cells
            if c.cell_type == "code" and (c.source == source_start or c.source.startswith(source_start + "("))
        ]
        return "".join(o.get("data", {}).get("text/html", "") for o in cell.outputs)

    assert "xai-ray run" in html_of("run = xai_ray.run")  # the run's own summary
    assert "<table" in html_of("top = run.topk")  # a DataFrame
    assert "cls_mass" in html_of("con = xai_ray.open_store")  # SQL through the query process, a DataFrame back
    assert html_of("page = run.report").startswith("<iframe srcdoc=")  # the whole report, inline
    assert "<table" in html_of("review = xai_ray.explain")  # its word scores
    assert html_of("review").startswith("<iframe srcdoc=")  # the explain page, inline
    chart = [c for c in notebook.cells if c.cell_type == "code" and c.source.startswith("xai_ray.topk_chart(")][0]
    shown = [(key, str(value)) for o in chart.outputs for key, value in o.get("data", {}).items()]
    assert any("vegalite" in key or (key == "text/html" and "vega" in value) for key, value in shown), shown[:2]
    assert os.environ.get("XAI_RAY_CACHE")  # the kernel got this process's environment
