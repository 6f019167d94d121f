"""The classifier: loading with its safety flags and fingerprint (``loading``), the forward pass that
captures fused attention (``capture``), input gradients (``gradients``), out-of-memory recovery (``recovery``).
"""
