"""`python -m jobs.analyze --config jobs/<x>.yaml [flags] [--set key=value ...]`: score a corpus and publish a run into the store (`xai-ray run`)."""

from __future__ import annotations

import sys

from xai_ray import cli


def main(argv: list[str] | None = None) -> int:
    return cli.main(["run", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
