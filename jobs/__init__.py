"""Job entrypoints: ``python -m jobs.<name> --config jobs/<x>.yaml [--set key=value ...]``.

Each is a thin wrapper around the library (the same code as the ``xai-ray`` command), so that
``ray job submit --working-dir . -- python -m jobs.analyze --config jobs/imdb.yaml`` and
``xai-ray submit jobs/imdb.yaml`` run unchanged on a laptop, a local Ray head or a GPU cluster.
"""
