"""Fine-tuning on Ray Train: the driver (``finetune``) and the worker loop (``loop``)."""
