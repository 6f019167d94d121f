"""Jobs around the pipeline: ``nightly`` (score what is new, dated report), ``evaluate`` (faithfulness
for a published run), ``submit`` (Ray Jobs API), ``schedule`` (crontab / systemd timer).
"""
