"""What every RL algorithm shares: the common ``Config`` fields, and the interface the driver asks of it.

An algorithm is one module (``reinforce``, ``ppo``, ``dqn``) that reads top to bottom: its ``Config``
(a subclass of ``Config`` here, adding its own fields), its ``Batch``, the policy, the actor (``act``:
collect one update's experience), the learner (``learn``: one update from a batch), and last
``ALGORITHM = Algorithm(...)`` naming those functions. ``runner`` is the one training driver for all.

The actor and the learner are fragments of a dataflow graph, pure functions of their inputs:

* ``act(policy, envs, cfg, step, carry) -> (batch, carry)``: deterministic for ``(cfg.seed, step)``;
  ``carry`` is what the actor keeps between updates (``init_carry``; None: rollouts are independent).
* ``learn(policy, optimizer, batch, cfg, extra, step) -> (metrics, extra)``: ``metrics["loss"]``,
  ``metrics["losses"]`` (CleanRL's names: ``policy_loss``, ...) and ``metrics["circuit_evals"]`` (the
  circuit rows the learner ran); ``extra`` is what it keeps besides parameters and optimizer state.

A batch has ``episode_returns``, ``episode_lengths``, ``n_steps``, ``steps_taken`` (-1: ``n_steps``) and
``circuit_evals``.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch
from hqflow.backends import DEFAULT_BACKEND
from hqflow.common.config import check_fields
from hqflow.gradients import GradientMethod, Spsa, gradient_method
from hqflow.workloads.rl.envs import EnvSpec, get_spec
from hqflow.workloads.rl.policies import ENCODINGS

BOUNDS = {
    "n_qubits": (1, 32), "n_layers": (1, 100), "beta": (0, 1e3, "(]"), "max_episodes": (1, 10**7),
    "gamma": (0, 1, "(]"), "lr_in": (0, 10), "lr_var": (0, 10), "lr_out": (0, 10), "lr_critic": (0, 10),
    "seed": (0, 2**63 - 1), "threads": (1, 256), "solve_window": (1, 10**5), "num_envs": (1, 4096),
    "groups": (1, 4096), "batch_episodes": (1, 10**5), "memory": (1, 10**7), "batch_size": (1, 10**6),
    "train_every": (1, 10**6), "target_every": (1, 10**6), "episodes_per_update": (1, 10**5),
    "eps_start": (0, 1), "eps_min": (0, 1), "eps_decay": (0, 1, "(]"), "critic_hidden": (1, 4096),
    "num_steps": (1, 10**6), "update_epochs": (1, 1000), "num_minibatches": (1, 10**6), "gae_lambda": (0, 1),
    "clip_coef": (0, 10, "(]"), "ent_coef": (0, 100), "vf_coef": (0, 100), "max_grad_norm": (0, 1e6, "(]"),
    "shots": (1, 10**7), "spsa_samples": (1, 1000), "spsa_epsilon": (0, 3.2, "(]"),
}
"""The hyperparameters' ranges, checked at construction (``hqflow.common.config.check_fields``): a bad ``--set`` is
refused before a run starts."""


@dataclass(frozen=True)
class Config:
    """The fields every algorithm has. A field left at None takes the environment's value (``setting``)."""

    env: str = "cartpole"
    """environment short name (``hqflow.workloads.rl.envs.SHORT_NAMES``, or a gymnasium id)"""
    obs_encoding: str = "auto"
    """how observations become circuit features: "auto" (the short name's own, else by the space), "box",
    "running" (running statistics where a Box is unbounded: actor state, carried and checkpointed), "binary"
    or "onehot" (``hqflow.workloads.rl.envs.get_spec``)"""
    n_qubits: int | None = None
    """circuit width; None takes the environment's (4 for CartPole and FrozenLake, 6 for Acrobot)"""
    n_layers: int = 5
    """re-uploading layers of the policy circuit"""
    encoding: str = "plain"
    """state encoding: "plain" (λ·s), "tanh" (tanh(λ·s)) or "atan" (arctan(λ·s))"""
    max_episodes: int = 1000
    """episode budget: the run stops when this many episodes have completed, if not solved before"""
    gamma: float = 1.0
    """discount factor"""
    lr_in: float = 0.1
    """Adam learning rate of the input scalings λ"""
    lr_var: float = 0.01
    """Adam learning rate of the circuit weights θ"""
    lr_out: float = 0.1
    """Adam learning rate of the readout weights w"""
    backend: str = DEFAULT_BACKEND
    """backend (or pool) name of the policy circuit (one that differentiates in process, like compiled:
    autograd; others: one job per forward pass, parameter shift for the gradient)"""
    seed: int = 0
    """seed of the initial weights, env resets, action sampling and the learner's draws"""
    threads: int = 1
    """torch intra-op threads during training (1 is fastest for these tiny batches)"""
    solve_window: int = 10
    """solved when the mean return of the last ``solve_window`` episodes reaches the env's threshold"""
    stop_when_solved: bool = True
    """stop training at the first update after which the agent counts as solved"""
    shots: int | None = None
    """shots per circuit: each value an estimate from this many samples (None: exact values where the backend
    has them; a cloud target's own default where it has not)"""
    gradient: str = GradientMethod.PARAM_SHIFT
    """the policy circuit's gradient: "param-shift" (exact rule: 1 + 2 x parameters circuits per row; on an
    in-process simulator with exact values, autograd), "spsa" (``spsa_samples`` random directions shared by all
    rows: 2 x spsa_samples circuits per row, whatever the parameter count; an estimate) or "twin" (the backend only
    acts, one circuit per env step; the learner differentiates a local twin, ``twin_noise``'s: biased where the
    twin is not the device)"""
    twin_noise: str | None = None
    """twin: the target whose noise model the twin simulates (``density``, e.g. ionq.qpu.aria-1); None: the
    noiseless compiled simulator"""
    spsa_samples: int = 2
    """spsa: the directions per update (each costs 2 circuits per row)"""
    spsa_epsilon: float = 0.1
    """spsa: the perturbation's size (radians)"""

    CONTINUOUS: ClassVar[bool] = False
    """whether the algorithm trains environments with continuous actions"""
    ENV_DEFAULTS: ClassVar[dict] = {"*": {}}
    """per-environment values of fields left at None (``"*"``: any other environment)"""

    def __post_init__(self):
        check_fields(self, BOUNDS)  # types and ranges, the field named in the error
        spec = self.spec  # ValueError naming the known environments
        if spec.continuous and not self.CONTINUOUS:
            raise ValueError(f"{self.env} has continuous actions (a Box of {spec.n_actions}); train it with --algo ppo")
        if self.encoding is not None and self.encoding not in ENCODINGS:
            raise ValueError(f"unknown encoding {self.encoding!r}; known: {', '.join(ENCODINGS)}")
        object.__setattr__(self, "gradient", gradient_method(self.gradient))
        if self.twin_noise is not None and self.gradient is not GradientMethod.TWIN:
            raise ValueError("twin_noise goes with gradient twin (--twin-noise with --gradient twin)")
        self.check(spec)

    def check(self, spec: EnvSpec) -> None:
        """The algorithm's checks across fields (its ranges are in ``BOUNDS``)."""

    @property
    def spec(self) -> EnvSpec:
        return get_spec(self.env, self.obs_encoding)


def setting(cfg: Config, name: str):
    """``cfg.<name>``, or the environment's value where the field is None (``Config.ENV_DEFAULTS``)."""
    value = getattr(cfg, name)
    if value is not None:
        return value
    table = type(cfg).ENV_DEFAULTS
    return table.get(cfg.env, table["*"])[name]


def policy_options(cfg: Config, backend=None) -> dict:
    """The keywords every policy takes from the config: its sizes, ``backend`` (an instance; None: ``cfg.backend``),
    the seed, and the circuit's ``QuantumLayer`` settings (shots and gradient estimator)."""
    spec, twin = cfg.spec, "compiled" if cfg.twin_noise is None else ("density", {"noise": cfg.twin_noise})
    spsa = Spsa(cfg.spsa_samples, cfg.spsa_epsilon) if cfg.gradient is GradientMethod.SPSA else None
    return {"n_qubits": cfg.n_qubits or spec.n_qubits, "n_layers": cfg.n_layers, "n_actions": spec.n_actions,
            "backend": cfg.backend if backend is None else backend, "seed": cfg.seed,
            "circuit": {"shots": cfg.shots, "gradient": cfg.gradient, "twin": twin, "spsa": spsa}}


def params(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of the module's parameters, by name."""
    return {k: v.detach().clone() for k, v in module.named_parameters()}


def obs_stats_carry(cfg: Config) -> dict | None:
    """The actor's carry of a ``running`` observation encoding: its statistics (``envs.ObsStats``); else None."""
    stats = cfg.spec.new_stats()
    return None if stats is None else {"obs_stats": stats}


@dataclass(frozen=True)
class Algorithm:
    """An algorithm's functions, as the driver calls them (the defaults: what most algorithms do)."""

    name: str
    Config: type  # its frozen config dataclass (a ``Config`` subclass)
    make_policy: Callable  # (cfg, backend=None) -> nn.Module: the circuit on backend (an instance) or cfg.backend
    make_optimizer: Callable  # (policy, cfg) -> torch.optim.Optimizer
    make_envs: Callable  # (cfg) -> the envs that act steps
    act: Callable  # (policy, envs, cfg, step, carry) -> (batch, carry): one update's experience
    learn: Callable  # (policy, optimizer, batch, cfg, extra, step) -> (metrics, extra): one update
    episodes_per_update: Callable  # (cfg) -> int: episodes an update completes (at least)
    circuits_per_step: Callable  # (cfg, gradient_rows) -> float: circuits an env step costs on a job backend
    init_carry: Callable = obs_stats_carry  # (cfg) -> carry | None: what the actor keeps between updates
    init_extra: Callable = lambda cfg, policy: None  # noqa: E731 - what the learner keeps besides its parameters
    solved_threshold: Callable = lambda cfg: cfg.spec.solved  # noqa: E731 - the mean return that counts as solved
    solve_window: Callable = lambda cfg: setting(cfg, "solve_window")  # noqa: E731 - the episodes that mean is over
    resolve: Callable = lambda cfg, in_process, devices: cfg  # noqa: E731 - the settings for where the circuit runs
    within_budget: Callable = lambda batch, cfg, episodes: batch  # noqa: E731 - the batch cut to complete at most
    # ``episodes`` (>= 1) episodes, as if the actor had stopped there (so the run's episode budget is exact)

    def updates(self, cfg: Config) -> int:
        """Updates of a run that does not stop early: ⌈max_episodes / episodes_per_update⌉."""
        return -(-cfg.max_episodes // self.episodes_per_update(cfg))
