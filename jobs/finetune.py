"""`python -m jobs.finetune --config jobs/<x>.yaml [flags] [--set key=value ...]`: fine-tune a classifier on Ray Train (`xai-ray finetune`)."""

from __future__ import annotations

import sys

from xai_ray import cli


def main(argv: list[str] | None = None) -> int:
    return cli.main(["finetune", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
