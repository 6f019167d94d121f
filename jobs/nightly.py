"""`python -m jobs.nightly --config jobs/<x>.yaml [flags] [--set key=value ...]`: score the corpus's new documents and publish tonight's report (`xai-ray nightly`)."""

from __future__ import annotations

import sys

from xai_ray import cli


def main(argv: list[str] | None = None) -> int:
    return cli.main(["nightly", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
