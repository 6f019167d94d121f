"""``python -m xai_ray.cli ARGS`` = ``xai-ray ARGS`` (what cron, systemd and Ray jobs run)."""

import sys

from xai_ray.cli.main import console

sys.exit(console())
