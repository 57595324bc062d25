"""The gradient-estimator settings the classical workloads share (``gradient``, ``spsa_samples``,
``spsa_epsilon`` and a training circuit's shots): their checks, and what ``Pipeline.execute`` takes."""
from __future__ import annotations

from hqflow.common.config import check_fields
from hqflow.gradients import GRADIENTS, GradientMethod, gradient_method

BOUNDS = {"spsa_samples": (1, 1000), "spsa_epsilon": (0, 3.2, "(]"), "shots": (1, 10**7), "seed": (0, 2**63 - 1),
          "steps": (1, 10**6)}  # a run keeps each step's history and spans: 10**6 steps is about a GB


def check(cfg, bounds: dict | None = None) -> None:
    """Every field's type and range (``BOUNDS`` and the workload's own), and the gradient (its name taken as a
    ``GradientMethod``): one-line errors."""
    check_fields(cfg, {**BOUNDS, **(bounds or {})})
    object.__setattr__(cfg, "gradient", gradient_method(cfg.gradient, GRADIENTS))


def spsa_setting(cfg) -> tuple[int, float] | None:
    """``Pipeline.execute``'s ``spsa=``: (samples, epsilon) for the SPSA gradient, else None."""
    return (cfg.spsa_samples, cfg.spsa_epsilon) if cfg.gradient is GradientMethod.SPSA else None
