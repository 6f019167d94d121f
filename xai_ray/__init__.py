"""xai-ray: corpus-scale attention explanations (raw, rollout, flow) for transformer classifiers on Ray.

In a notebook::

    import xai_ray
    run = xai_ray.run(data="../shared/data/imdb/train.parquet", model="minilm", limit=50, store="store")
    # Ray and the model's actors stay warm for the next run; xai_ray.shutdown() releases them
    run.docs(); run.words(); run.topk(); run.report()
    con = xai_ray.open_store("store")                    # read-only SQL over the views: con.sql(...)
    xai_ray.explain("A slow start, but superb.", model="minilm")  # renders inline; .scores
"""

from xai_ray.methods.base import build_attention
from xai_ray.methods.flow import attention_flow
from xai_ray.methods.rollout import attention_rollout

__version__ = "0.1.0"

# The notebook API lives in xai_ray.api and loads on first use, so `xai-ray --help` stays quick.
API = (
    "run",
    "shutdown",
    "open_store",
    "explain",
    "Run",
    "RunFailed",
    "Page",
    "Explanation",
    "report_chart",
    "topk_chart",
    "confusion_chart",
    "contrast_chart",
    "layers_chart",
    "agreement_chart",
    "REPORT_CHARTS",
)

__all__ = ["attention_flow", "attention_rollout", "build_attention", "__version__", *API]


def __getattr__(name: str):
    if name in API:
        from xai_ray import api

        return getattr(api, name)
    raise AttributeError(f"module 'xai_ray' has no attribute {name!r}")
