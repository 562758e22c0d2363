"""Gradient utilities (``clip_grad_norm_``)."""
