"""Numpy optimizers for learner fragments, with their state as plain data.

The state is a dict of JSON-friendly values, so it can ride a loop-carried
edge (``init=adam_init(n)``) and be checkpointed with the graph's state.
"""
from __future__ import annotations

import numpy as np


def adam_init(n: int) -> dict:
    """Adam's state for ``n`` parameters before the first step."""
    return {"t": 0, "m": [0.0] * n, "v": [0.0] * n}


def adam_step(params, grad, state: dict, lr: float, beta1: float = 0.9, beta2: float = 0.999,
              eps: float = 1e-8) -> tuple[np.ndarray, dict]:
    """One Adam step (Kingma & Ba, with bias correction); returns ``(new_params, new_state)``."""
    grad = np.asarray(grad, dtype=float)
    t = state["t"] + 1
    m = beta1 * np.asarray(state["m"], dtype=float) + (1 - beta1) * grad
    v = beta2 * np.asarray(state["v"], dtype=float) + (1 - beta2) * grad**2
    step = lr * (m / (1 - beta1**t)) / (np.sqrt(v / (1 - beta2**t)) + eps)
    return np.asarray(params, dtype=float) - step, {"t": t, "m": m, "v": v}
