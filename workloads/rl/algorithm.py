"""What the RL runner asks of an algorithm: one small declared interface, no probing.

Each algorithm module (``reinforce``, ``ppo``, ``dqn``) ends with ``ALGORITHM = Algorithm(...)``
naming its functions; ``runner.algorithm(name)`` returns it. A field is always there: an algorithm
with nothing to do for one (no actor state to carry, no config to adjust) says so in its function.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Algorithm:
    name: str
    Config: type
    """its frozen config dataclass (fields checked at construction)"""
    make_policy: Callable
    """``(cfg) -> nn.Module``"""
    make_optimizer: Callable
    """``(policy, cfg) -> torch.optim.Optimizer``"""
    make_envs: Callable
    """``(cfg) -> envs`` that ``act`` steps"""
    init_carry: Callable
    """``(cfg) -> carry | None``: what the actor keeps between updates (None: rollouts are independent)"""
    init_extra: Callable
    """``(cfg, policy) -> extra``: what the learner keeps besides parameters and optimizer state"""
    act: Callable
    """``(policy, envs, cfg, step, carry) -> (batch, carry)``: one update's experience"""
    learn: Callable
    """``(policy, optimizer, batch, cfg, extra, step) -> (metrics, extra)``: one update"""
    episodes_per_update: Callable
    """``(cfg) -> int``: episodes an update completes (at least; the runner stops at the budget)"""
    solved_threshold: Callable
    """``(cfg) -> float``: the mean return that counts as solved"""
    solve_window: Callable
    """``(cfg) -> int``: the episodes that mean is over"""
    resolve: Callable
    """``(cfg, in_process, devices) -> cfg``: the config for where the circuit runs (``auto`` settings)"""
    circuits_per_step: Callable
    """``(cfg, gradient_rows) -> float``: circuits an environment step costs where the circuit runs as jobs
    (acting, and the learner's parameter-shift gradients of ``gradient_rows`` circuits per state)"""
    within_budget: Callable
    """``(batch, cfg, episodes) -> batch``: the batch cut to complete at most ``episodes`` (>= 1) episodes, as if
    the actor had stopped there (the run's episode budget is exact)"""
