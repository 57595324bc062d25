"""REINFORCE with a softmax quantum policy (Jerbi et al. 2021), readable top to bottom.

The defaults reproduce the TensorFlow Quantum tutorial "Parametrized quantum circuits for
reinforcement learning": CartPole-v1, 4 qubits, 5 layers, 10 episodes per update, γ = 1,
Adam with learning rates 0.1 (λ), 0.01 (θ), 0.1 (w).

The loop is two fragments that a dataflow runtime can call on their own:

* ``act(policy, envs, cfg, step, carry) -> (Batch, carry)`` (the actor): runs the update's
  episodes side by side, one batched no-grad policy forward per time step, actions
  sampled by inverse CDF with a numpy ``Generator`` seeded from ``(seed, step)`` (env
  resets too): deterministic. The environments are split into ``groups`` whose forward
  passes overlap with each other's environment steps, and with ``autoreset`` they run
  continuously, every job full (``hqflow.workloads.rl.actor``); ``collect`` is the
  one-group, fresh-episodes case.
* ``update(policy, optimizer, batch, cfg) -> dict`` (the learner): returns-to-go,
  normalized, and one Adam step on all of the batch's states in one forward+backward.

``train(cfg)`` alternates them until the agent is solved or ``max_episodes`` ran out.

    from hqflow.workloads.rl import reinforce
    out = reinforce.train(reinforce.Config(seed=1))
    print(out["episodes_to_solve"], out["seconds"])
"""
from __future__ import annotations

import itertools
import time
from dataclasses import asdict, dataclass, replace

import numpy as np
import torch
from hqflow.workloads.rl import actor
from hqflow.config import check_fields
from hqflow.workloads.rl.algorithm import Algorithm
from hqflow.workloads.rl.bounds import BOUNDS
from hqflow.workloads.rl.envs import FreshEnvs, ObsEncoder, get_spec
from hqflow.torch import differentiates
from hqflow.workloads.rl.policies import ENCODINGS, SoftmaxPQC

NORMALIZE = ("batch", "episode", "none")


@dataclass(frozen=True)
class Config:
    env: str = "cartpole"
    """environment short name (``hqflow.workloads.rl.envs.SHORT_NAMES``, or a gymnasium id)"""
    obs_encoding: str = "auto"
    """how observations become circuit features: "auto" (the short name's own, else by the space), "box",
    "running" (running statistics where a Box is unbounded: actor state, carried and checkpointed), "binary"
    or "onehot" (``hqflow.workloads.rl.envs.get_spec``)"""
    n_qubits: int | None = None
    """circuit width; None takes the environment's (4 for CartPole)"""
    n_layers: int = 5
    """re-uploading layers of the policy circuit"""
    encoding: str = "plain"
    """state encoding: "plain" (λ·s), "tanh" (tanh(λ·s)) or "atan" (arctan(λ·s))"""
    beta: float = 1.0
    """inverse temperature of the softmax policy"""
    batch_episodes: int = 10
    """episodes collected per update (run side by side on as many envs)"""
    max_episodes: int = 1000
    """stop after this many episodes if not solved"""
    gamma: float = 1.0
    """discount factor of the returns-to-go"""
    lr_in: float = 0.1
    """Adam learning rate of the input scalings λ"""
    lr_var: float = 0.01
    """Adam learning rate of the circuit weights θ"""
    lr_out: float = 0.1
    """Adam learning rate of the readout weights w"""
    normalize: str = "batch"
    """returns normalization: "batch" ((G - mean) / (std + 1e-8) over all the batch's steps),
    "episode" (the same within each episode, as the TFQ tutorial's code does) or "none\""""
    baseline: bool = False
    """subtract a per-timestep baseline after normalizing: the mean normalized return at step t
    over the batch's episodes that lasted past t"""
    backend: str = "compiled"
    """backend (or pool) name of the policy circuit (one that differentiates in process, like
    compiled: autograd; others: one job per forward pass, parameter shift for the gradient)"""
    groups: int | None = None
    """environment groups whose forward-pass jobs overlap with each other's environment steps;
    None: 1 on an in-process backend, else one per device slot of the backend's pool"""
    num_envs: int | None = None
    """environments stepped side by side; None: batch_episodes, times groups with autoreset"""
    autoreset: bool | None = None
    """environments start their next episode at once, so jobs stay full, and episodes carry over
    between updates (``actor`` module docstring); None: on for job backends, off in process"""
    seed: int = 0
    """seed of the initial weights, env resets and action sampling"""
    threads: int = 1
    """torch intra-op threads during training (1 is fastest for these tiny batches)"""
    solve_window: int = 10
    """solved when the mean return of the last ``solve_window`` episodes reaches the env's threshold"""
    stop_when_solved: bool = True
    """stop training at the first update after which the agent counts as solved"""
    dtype: str = "float32"
    """the policy's parameters and values: "float32", or "float64" where runs are compared for
    equality (float32 roundoff moves parameters whose true gradient is 0, through Adam, by up to lr)"""

    def __post_init__(self):
        check_fields(self, BOUNDS)  # types and ranges, the field named in the error
        spec = get_spec(self.env, self.obs_encoding)  # ValueError naming the known environments
        if spec.continuous:
            raise ValueError(f"{self.env} has continuous actions (a Box of {spec.n_actions}); train it with --algo ppo")
        if self.encoding not in ENCODINGS:
            raise ValueError(f"unknown encoding {self.encoding!r}; known: {', '.join(ENCODINGS)}")
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"dtype must be float32 or float64, got {self.dtype!r}")
        if self.normalize not in NORMALIZE:
            raise ValueError(f"normalize must be one of {', '.join(NORMALIZE)}, got {self.normalize!r}")
        if self.batch_episodes < 1 or self.max_episodes < 1 or not 0 < self.gamma <= 1 or self.threads < 1:
            raise ValueError("need batch_episodes >= 1, max_episodes >= 1, 0 < gamma <= 1 and threads >= 1")
        for name in ("groups", "num_envs"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"{name} must be an integer >= 1 or None, got {value!r}")
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


def snapshot(policy: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A detached copy of the policy's parameters (what an actor may run with while the learner moves on)."""
    return {k: v.detach().clone() for k, v in policy.named_parameters()}


# --- the actor -------------------------------------------------------------------------------

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
def collect(policy, params, envs: FreshEnvs, n_episodes: int, seed) -> Batch:
    """Run ``n_episodes`` fresh episodes (in waves of ``len(envs)``) with the policy's current
    parameters, or with ``params`` (a ``snapshot``) when given: one group, no autoreset."""
    if params is not None:
        return _with_params(policy, params, collect, policy, None, envs, n_episodes, seed)
    return as_batch(*actor.fresh_episodes(sampler(policy), envs, n_episodes, seed))


def _with_params(policy, params, fn, *args):
    saved = snapshot(policy)
    try:
        with torch.no_grad():
            for k, p in policy.named_parameters():
                p.copy_(params[k])
        return fn(*args)
    finally:
        with torch.no_grad():
            for k, p in policy.named_parameters():
                p.copy_(saved[k])


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


def update(policy, optimizer: torch.optim.Optimizer, batch: Batch, cfg: Config) -> dict:
    """One gradient step on loss = -Σ log π(a|s) · G / n_episodes (one batched forward+backward)."""
    G = torch.as_tensor(returns_to_go(batch, cfg), dtype=policy.output.dtype)
    log_probs = policy.log_probs(torch.from_numpy(batch.states))  # [T, A]
    chosen = log_probs.gather(1, torch.from_numpy(batch.actions)[:, None])[:, 0]
    loss = -(chosen * G).sum() / len(batch.lengths)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    returns = batch.episode_returns
    return {"loss": float(loss.detach()), "mean_return": float(returns.mean()), "steps": len(batch.actions)}


# --- the loop --------------------------------------------------------------------------------

def make_policy(cfg: Config) -> SoftmaxPQC:
    spec = get_spec(cfg.env, cfg.obs_encoding)
    return SoftmaxPQC(n_qubits=cfg.n_qubits or spec.n_qubits, n_layers=cfg.n_layers, n_actions=spec.n_actions,
                      encoding=cfg.encoding, beta=cfg.beta, backend=cfg.backend, seed=cfg.seed,
                      dtype=getattr(torch, cfg.dtype))


def train(cfg: Config = Config(), progress=None) -> dict:
    """Alternate ``collect`` and ``update``; ``progress(episodes_done, metrics)`` after each update.

    Returns the config, per-episode ``returns``, ``episodes_to_solve`` (the episode count at
    the first update after which the last ``solve_window`` returns average at least the
    env's threshold; None if never), ``seconds``, ``env_steps``, ``env_steps_per_s``,
    ``circuit_evals`` (actor rows + learner rows), ``circuit_evals_per_s`` and the final
    ``params`` (a ``snapshot``).
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        spec = get_spec(cfg.env, cfg.obs_encoding)
        policy = make_policy(cfg)
        optimizer = torch.optim.Adam(policy.param_groups(cfg.lr_in, cfg.lr_var, cfg.lr_out))
        backend = policy.job_backend()
        cfg = resolve(cfg, differentiates(backend), backend.max_in_flight or 1)
        envs, carry = make_envs(cfg), init_carry(cfg)
        returns, solved_at, env_steps, evals = [], None, 0, 0
        t0 = time.perf_counter()
        for k in range(-(-cfg.max_episodes // cfg.batch_episodes)):
            batch, carry = act(policy, envs, cfg, k, carry)
            metrics = update(policy, optimizer, batch, cfg)
            returns += batch.episode_returns.tolist()
            env_steps += len(batch.actions)
            evals += batch.circuit_evals + len(batch.actions)
            window = returns[-cfg.solve_window:]
            if solved_at is None and len(window) == cfg.solve_window and np.mean(window) >= spec.solved:
                solved_at = len(returns)
            if progress is not None:
                progress(len(returns), metrics)
            if solved_at is not None and cfg.stop_when_solved:
                break
        seconds = time.perf_counter() - t0
        for e in envs:
            e.close()
    finally:
        torch.set_num_threads(threads)
    return {"config": asdict(cfg), "returns": returns, "episodes_to_solve": solved_at, "seconds": seconds,
            "env_steps": env_steps, "env_steps_per_s": env_steps / seconds, "circuit_evals": evals,
            "circuit_evals_per_s": evals / seconds, "params": snapshot(policy)}


# --- the fragment protocol of hqflow.workloads.rl.runner (the same loop as a dataflow graph) ---

def make_optimizer(policy, cfg: Config) -> torch.optim.Optimizer:
    return torch.optim.Adam(policy.param_groups(cfg.lr_in, cfg.lr_var, cfg.lr_out))


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
    spec = get_spec(cfg.env, cfg.obs_encoding)
    return [FreshEnvs(spec, n) for n in actor.split(cfg.num_envs or cfg.batch_episodes, cfg.groups or 1)]


def init_carry(cfg: Config) -> dict | None:
    """What the actor carries from one update to the next (None: nothing, so rollouts are independent):
    ``groups``, one ``actor.Carry`` per group with autoreset (None: made at the first update), and
    ``obs_stats``, the running statistics of a ``running`` observation encoding (``envs.ObsStats``)."""
    stats = get_spec(cfg.env, cfg.obs_encoding).new_stats()
    if not cfg.autoreset and stats is None:
        return None
    return {"groups": [None] * (cfg.groups or 1) if cfg.autoreset else None, "obs_stats": stats}


def init_extra(cfg: Config, policy) -> None:
    return None  # REINFORCE's learner keeps nothing but its parameters and Adam's state


def episodes_per_update(cfg: Config) -> int:
    return cfg.batch_episodes


def solved_threshold(cfg: Config) -> float:
    return get_spec(cfg.env, cfg.obs_encoding).solved


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
    groups, choose, spec = cfg.groups or 1, sampler(policy), get_spec(cfg.env, cfg.obs_encoding)
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


def learn(policy, optimizer, batch: Batch, cfg: Config, extra, step: int) -> tuple[dict, None]:
    metrics = update(policy, optimizer, batch, cfg)
    return {"loss": metrics["loss"], "circuit_evals": batch.n_steps}, None


__all__ = ["Batch", "Config", "act", "as_batch", "collect", "init_carry", "learn", "make_envs", "make_optimizer",
           "make_policy", "resolve", "returns_to_go", "sampler", "snapshot", "train", "update"]


def solve_window(cfg: Config) -> int:
    return cfg.solve_window


def circuits_per_step(cfg: Config, gradient_rows: int) -> float:
    """One circuit to act, and the gradient at every state of the episodes: ``1 + gradient_rows``."""
    return 1 + gradient_rows


def within_budget(batch, cfg: Config, episodes: int):
    """The batch as it is: the actor never completes more episodes than the budget leaves (``n`` per update)."""
    return batch


ALGORITHM = Algorithm("reinforce", Config, make_policy, make_optimizer, make_envs, init_carry, init_extra, act, learn,
                      episodes_per_update, solved_threshold, solve_window, resolve, circuits_per_step, within_budget)
