"""REINFORCE with a softmax quantum policy (Jerbi et al. 2021), readable top to bottom.

The defaults reproduce the TensorFlow Quantum tutorial "Parametrized quantum circuits for
reinforcement learning": CartPole-v1, 4 qubits, 5 layers, 10 episodes per update, γ = 1,
Adam with learning rates 0.1 (λ), 0.01 (θ), 0.1 (w).

* The actor (``act``) runs the update's episodes side by side, one batched no-grad policy forward per
  time step, actions sampled by inverse CDF with a numpy ``Generator`` seeded from ``(seed, step)`` (env
  resets too): deterministic. The environments are split into ``groups`` whose forward passes overlap with
  each other's environment steps, and with ``autoreset`` they run continuously, every job full
  (``hqflow.workloads.rl.actor``).
* The learner (``learn``): returns-to-go, normalized, and one Adam step on all of the batch's states in one
  forward+backward.

Train it with ``hqflow train cartpole`` or ``runner.train("reinforce", reinforce.Config(seed=1))``.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import numpy as np
import torch
from hqflow.workloads.rl import actor
from hqflow.workloads.rl import algorithm
from hqflow.workloads.rl.algorithm import Algorithm
from hqflow.workloads.rl.envs import EnvSpec, FreshEnvs, ObsEncoder
from hqflow.workloads.rl.policies import SoftmaxPQC

NORMALIZE = ("batch", "episode", "none")


@dataclass(frozen=True)
class Config(algorithm.Config):
    beta: float = 1.0
    """inverse temperature of the softmax policy"""
    batch_episodes: int = 10
    """episodes collected per update (run side by side on as many envs)"""
    normalize: str = "batch"
    """returns normalization: "batch" ((G - mean) / (std + 1e-8) over all the batch's steps),
    "episode" (the same within each episode, as the TFQ tutorial's code does) or "none\""""
    baseline: bool = False
    """subtract a per-timestep baseline after normalizing: the mean normalized return at step t
    over the batch's episodes that lasted past t"""
    groups: int | None = None
    """environment groups whose forward-pass jobs overlap with each other's environment steps;
    None: 1 on an in-process backend, else one per device slot of the backend's pool"""
    num_envs: int | None = None
    """environments stepped side by side; None: batch_episodes, times groups with autoreset"""
    autoreset: bool | None = None
    """environments start their next episode at once, so jobs stay full, and episodes carry over
    between updates (``actor`` module docstring); None: on for job backends, off in process"""
    dtype: str = "float32"
    """the policy's parameters and values: "float32", or "float64" where runs are compared for
    equality (float32 roundoff moves parameters whose true gradient is 0, through Adam, by up to lr)"""

    def check(self, spec: EnvSpec) -> None:
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"dtype must be float32 or float64, got {self.dtype!r}")
        if self.normalize not in NORMALIZE:
            raise ValueError(f"normalize must be one of {', '.join(NORMALIZE)}, got {self.normalize!r}")
        if self.groups is not None and self.groups > self.batch_episodes:
            raise ValueError(f"groups ({self.groups}) cannot exceed batch_episodes ({self.batch_episodes}): "
                             "every group completes its share of each update's episodes")
        if self.groups is not None and self.num_envs is not None and self.num_envs < self.groups:
            raise ValueError(f"num_envs ({self.num_envs}) must be at least groups ({self.groups})")


@dataclass
class Batch:
    """What the actor hands the learner: episodes laid out one after the other."""

    states: np.ndarray  # [T, n_features] float32, encoded
    actions: np.ndarray  # [T] int64
    rewards: np.ndarray  # [T] float64
    lengths: np.ndarray  # [n_episodes] steps of each episode (they sum to T)
    circuit_evals: int  # policy rows evaluated while collecting
    steps_taken: int = -1  # env steps the actor ran for this batch (-1: T); with autoreset, steps of
    # episodes that carry over to later updates count here, where they were run

    @property
    def n_steps(self) -> int:
        return len(self.actions)

    @property
    def episode_returns(self) -> np.ndarray:
        return np.add.reduceat(self.rewards, np.r_[0, np.cumsum(self.lengths)[:-1]])

    @property
    def episode_lengths(self) -> np.ndarray:
        return self.lengths


# --- the policy ------------------------------------------------------------------------------

def make_policy(cfg: Config, backend=None) -> SoftmaxPQC:
    spec, backend = cfg.spec, cfg.backend if backend is None else backend
    return SoftmaxPQC(n_qubits=cfg.n_qubits or spec.n_qubits, n_layers=cfg.n_layers, n_actions=spec.n_actions,
                      encoding=cfg.encoding, beta=cfg.beta, backend=backend, seed=cfg.seed,
                      dtype=getattr(torch, cfg.dtype))


def make_optimizer(policy, cfg: Config) -> torch.optim.Optimizer:
    return torch.optim.Adam(policy.param_groups(cfg.lr_in, cfg.lr_var, cfg.lr_out))


# --- the actor -------------------------------------------------------------------------------

def resolve(cfg: Config, in_process: bool, devices: int = 1) -> Config:
    """``cfg`` with ``groups``, ``num_envs`` and ``autoreset`` decided for a backend that runs in
    process (autograd) or not, with ``devices`` device slots: see the fields' docstrings."""
    groups = cfg.groups or (1 if in_process else min(cfg.batch_episodes, max(1, devices)))
    autoreset = (not in_process) if cfg.autoreset is None else cfg.autoreset
    num_envs = cfg.num_envs or (cfg.batch_episodes * groups if autoreset else cfg.batch_episodes)
    return replace(cfg, groups=groups, num_envs=max(num_envs, groups), autoreset=autoreset)


def make_envs(cfg: Config) -> list[FreshEnvs]:
    """Each group's scratch environments for fresh episodes (none with autoreset: they live in the carry)."""
    if cfg.autoreset:
        return []
    return [FreshEnvs(cfg.spec, n) for n in actor.split(cfg.num_envs or cfg.batch_episodes, cfg.groups or 1)]


def init_carry(cfg: Config) -> dict | None:
    """What the actor carries from one update to the next (None: nothing, so rollouts are independent):
    ``groups``, one ``actor.Carry`` per group with autoreset (None: made at the first update), and
    ``obs_stats``, the running statistics of a ``running`` observation encoding (``envs.ObsStats``)."""
    stats = cfg.spec.new_stats()
    if not cfg.autoreset and stats is None:
        return None
    return {"groups": [None] * (cfg.groups or 1) if cfg.autoreset else None, "obs_stats": stats}


def sampler(policy) -> actor.ChooseFn:
    """One time step's actions for a group's states: one batched policy forward, inverse-CDF sampling."""
    def choose(states: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        probs = policy(torch.from_numpy(states)).double().numpy()  # [k, A]
        u = rng.random(len(states))[:, None]
        return np.minimum((u > np.cumsum(probs, axis=1)).sum(axis=1), probs.shape[1] - 1)
    return choose


def as_batch(episodes: list[actor.Episode], rows: int) -> Batch:
    """Episodes laid out one after the other."""
    return Batch(np.concatenate([e.states for e in episodes]), np.concatenate([e.actions for e in episodes]),
                 np.concatenate([e.rewards for e in episodes]), np.array([len(e.actions) for e in episodes]), rows,
                 rows)  # every policy row is one env step


@torch.no_grad()
def act(policy, envs: list[FreshEnvs], cfg: Config, step: int,
        carry: dict | None = None) -> tuple[Batch, dict | None]:
    """Update ``step``'s episodes, the groups side by side: ``(batch, carry)``.

    Without autoreset, group g runs its share of fresh episodes with a generator seeded
    from ``(seed, step, g)`` (``(seed, step)`` with one group). With autoreset the groups
    run on from ``carry`` (first started from ``(seed, 7919, g)``). Running observation
    statistics start from the carry's, each group takes in its own observations, and they
    are added up in group order (``envs.ObsEncoder``)."""
    n = min(cfg.batch_episodes, cfg.max_episodes - step * cfg.batch_episodes)
    groups, choose, spec = cfg.groups or 1, sampler(policy), cfg.spec
    carry = carry or {"groups": None, "obs_stats": None}
    encoders = [ObsEncoder(spec, carry["obs_stats"]) for _ in range(groups)]
    if cfg.autoreset:
        sizes = actor.split(cfg.num_envs or cfg.batch_episodes, groups)
        episodes, carries, rows = actor.continuous_episodes(choose, spec, sizes, n,
                                                            [[cfg.seed, 7919, g] for g in range(groups)],
                                                            carry["groups"], encoders)
    else:
        quotas = actor.split(n, groups)
        results = actor.run_groups(lambda g: actor.fresh_episodes(
            choose, envs[g], quotas[g], [cfg.seed, step] if groups == 1 else [cfg.seed, step, g], f"envs{g}",
            encoders[g]), list(range(groups)))
        episodes, carries, rows = [e for eps, _ in results for e in eps], None, sum(r for _, r in results)
    stats = ObsEncoder.merge(encoders[0].start, encoders)  # every group started from the same statistics
    return as_batch(episodes, rows), (None if carries is None and stats is None else
                                      {"groups": carries, "obs_stats": stats})


# --- the learner -----------------------------------------------------------------------------

def returns_to_go(batch: Batch, cfg: Config) -> np.ndarray:
    """G_t = Σ_k γ^k r_{t+k} within each episode, normalized (and baselined) as ``cfg`` says: [T]."""
    bounds = np.r_[0, np.cumsum(batch.lengths)]
    G = np.empty_like(batch.rewards)
    for a, b in itertools.pairwise(bounds):
        acc = 0.0
        for t in range(b - 1, a - 1, -1):
            acc = batch.rewards[t] + cfg.gamma * acc
            G[t] = acc
    if cfg.normalize == "batch":
        G = (G - G.mean()) / (G.std() + 1e-8)
    elif cfg.normalize == "episode":
        for a, b in itertools.pairwise(bounds):
            G[a:b] = (G[a:b] - G[a:b].mean()) / (G[a:b].std() + 1e-8)
    if cfg.baseline:
        t = np.concatenate([np.arange(n) for n in batch.lengths])  # time step of every row
        G = G - (np.bincount(t, weights=G) / np.bincount(t))[t]
    return G


def learn(policy, optimizer, batch: Batch, cfg: Config, extra, step: int) -> tuple[dict, None]:
    """One gradient step on loss = -Σ log π(a|s) · G / n_episodes (one batched forward+backward)."""
    G = torch.as_tensor(returns_to_go(batch, cfg), dtype=policy.output.dtype)
    log_probs = policy.log_probs(torch.from_numpy(batch.states))  # [T, A]
    chosen = log_probs.gather(1, torch.from_numpy(batch.actions)[:, None])[:, 0]
    loss = -(chosen * G).sum() / len(batch.lengths)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    loss = float(loss.detach())
    return {"loss": loss, "losses": {"policy_loss": loss}, "circuit_evals": batch.n_steps}, None


def circuits_per_step(cfg: Config, gradient_rows: int) -> float:
    """One circuit to act, and the gradient at every state of the episodes: ``1 + gradient_rows``."""
    return 1 + gradient_rows


ALGORITHM = Algorithm("reinforce", Config, make_policy, make_optimizer, make_envs, act, learn,
                      episodes_per_update=lambda cfg: cfg.batch_episodes, circuits_per_step=circuits_per_step,
                      init_carry=init_carry, resolve=resolve)
