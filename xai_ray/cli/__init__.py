"""``xai-ray``: argument parsing -> config -> pipeline / query / report / jobs.

Problems a user can fix (a wrong path, an offline Hub id, a bad option) end with one sentence on
stderr and exit status 2, never a traceback. ``main`` is in ``cli.main``; commands in ``scoring``,
``reading`` and ``jobs``; flags shared by ``run`` and ``nightly`` and the exit status in ``flags``.
"""

from xai_ray.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
