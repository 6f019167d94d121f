"""The documentation cannot drift: the reference pages are what scripts/gen_docs.py makes from the
code today, every relative link in README.md, docs/ and bench/README.md reaches a file (and a
heading, when it names one), and the README keeps the two commands that start everything."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", ROOT / "bench" / "README.md", *(ROOT / "docs").rglob("*.md")])
FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.S | re.M)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _prose(text: str) -> str:
    """The text a reader sees as prose: code blocks and inline code taken out (links there are examples)."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def anchors(text: str) -> set[str]:
    """GitHub's heading ids: the heading's visible text, lower-cased, punctuation dropped but `-`
    and `_`, spaces made hyphens; a repeated id gets -1, -2, ..."""
    seen: dict[str, int] = {}
    out = set()
    for line in FENCE.sub("", text).splitlines():
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        visible = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(1)).replace("`", "")
        slug = re.sub(r"[^\w\- ]", "", visible.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_the_anchor_rule_matches_githubs():
    text = "# Faithfulness (`--evaluate`)\n## `heads.py`: the per-head statistics' cost\n## Tests\n## Tests\n"
    assert anchors(text) == {"faithfulness---evaluate", "headspy-the-per-head-statistics-cost", "tests", "tests-1"}
    assert anchors("```\n# not a heading\n```\n") == set()


def test_generated_reference_pages_match_the_code():
    stale = [
        str(path.relative_to(ROOT))
        for path, text in _gen_docs().render().items()
        if not path.is_file() or path.read_text() != text
    ]
    assert not stale, f"run `python scripts/gen_docs.py`: {stale} differ from the code"


def test_every_relative_link_reaches_a_file_and_its_heading():
    broken = []
    for page in PAGES:
        for target in LINK.findall(_prose(page.read_text())):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, file: point outside the repository
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)
    assert len(PAGES) > 10  # the guide is there to check


def test_the_readme_is_short_and_starts_with_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 150
    first_block = FENCE.search(readme).group(0)
    assert (
        "bash scripts/xai-ray.sh run --data ../shared/data/imdb/train.parquet --limit 200 --model minilm --store store"
        in first_block
    )
    assert "bash scripts/test.sh" in first_block
