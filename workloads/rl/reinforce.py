"""REINFORCE with a softmax quantum policy (Jerbi et al. 2021), readable top to bottom.

The defaults reproduce the TensorFlow Quantum tutorial "Parametrized quantum circuits for reinforcement learning":
CartPole-v1, 4 qubits, 5 layers, 10 episodes per update, γ = 1, Adam with learning rates 0.1 (λ), 0.01 (θ), 0.1 (w).

* The actor (``act``) runs the update's episodes side by side, one batched no-grad policy forward per time step,
  actions sampled by inverse CDF with numpy ``Generator``s seeded from ``(seed, step)`` (env resets too):
  deterministic. Its envs are split into ``groups`` (the README's "On a QPU"), each with its own generator, that run
  side by side (``run_groups``, as in Sample Factory or EnvPool's async mode; on a job backend each group's env work
  is a span of its own, lane ``cpu/0/envs1``...). Any completion order gives the same batch.
* Without ``autoreset`` (``fresh_episodes``) a group runs its share of new episodes to the end, in waves of its envs
  (``envs.FreshEnvs``). With it (``continuous_episodes``) the groups step in lockstep rounds, an update takes the
  first episodes completed by (round, group, env), and the rest carry over with the running ones in each group's
  ``Carry`` (an episode that spans updates was acted by the parameters of the updates it ran in).
* The learner (``learn``): normalized returns-to-go, one Adam step (one forward+backward on all the batch's states).

Train it with ``hqflow train cartpole`` or ``runner.train("reinforce", reinforce.Config(seed=1))``.
"""
from __future__ import annotations

import contextvars
import copy
import itertools
import threading
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace

import gymnasium as gym
import numpy as np
import torch
from hqflow.workloads.rl import algorithm
from hqflow.workloads.rl.algorithm import Algorithm
from hqflow.workloads.rl.envs import EnvSpec, FreshEnvs, ObsEncoder, reset_finished, vector_env
from hqflow.workloads.rl.policies import SoftmaxPQC, twin_offsets

from hqflow.common.threads import DaemonPool
from hqflow.jobs.client import current_client
from hqflow.torch import seeded_part

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
    between updates (module docstring); None: on for job backends, off in process"""
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
    steps_taken: int = -1  # env steps run for this batch (-1: T), with autoreset those of episodes carried over too
    offsets: np.ndarray | None = None  # [T, n_obs] a twin policy's: the QPU's values minus the twin's, as acted

    @property
    def n_steps(self) -> int:
        return len(self.actions)

    @property
    def episode_returns(self) -> np.ndarray:
        return np.add.reduceat(self.rewards, np.r_[0, np.cumsum(self.lengths)[:-1]])

    episode_lengths = property(lambda self: self.lengths)


# --- the policy ------------------------------------------------------------------------------

def make_policy(cfg: Config, backend=None) -> SoftmaxPQC:
    return SoftmaxPQC(encoding=cfg.encoding, beta=cfg.beta, dtype=getattr(torch, cfg.dtype),
                      **algorithm.policy_options(cfg, backend))


def make_optimizer(policy, cfg: Config) -> torch.optim.Optimizer:
    return torch.optim.Adam(policy.param_groups(cfg.lr_in, cfg.lr_var, cfg.lr_out))


# --- the actor -------------------------------------------------------------------------------

def resolve(cfg: Config, in_process: bool, devices: int = 1) -> Config:
    """``cfg`` with ``groups``, ``num_envs``, ``autoreset`` set for a backend in process or not, with ``devices``."""
    groups = cfg.groups or (1 if in_process else min(cfg.batch_episodes, max(1, devices)))
    autoreset = (not in_process) if cfg.autoreset is None else cfg.autoreset
    num_envs = cfg.num_envs or (cfg.batch_episodes * groups if autoreset else cfg.batch_episodes)
    return replace(cfg, groups=groups, num_envs=max(num_envs, groups), autoreset=autoreset)


def split(n: int, parts: int) -> list[int]:
    """``n`` items over ``parts`` groups, as evenly as possible, the first groups taking the extra."""
    return [n // parts + (g < n % parts) for g in range(parts)]


def make_envs(cfg: Config) -> list[FreshEnvs]:
    """Each group's scratch environments for fresh episodes (none with autoreset: they live in the carry)."""
    sizes = [] if cfg.autoreset else split(cfg.num_envs or cfg.batch_episodes, cfg.groups or 1)
    return [FreshEnvs(cfg.spec, n) for n in sizes]


@dataclass
class Episode:
    """One whole episode: encoded states, actions and rewards, one row per step."""

    states: np.ndarray  # [T, n_features] float32
    actions: np.ndarray  # [T] int64
    rewards: np.ndarray  # [T] float64
    offsets: np.ndarray | None = None  # [T, n_obs] a twin policy's (``policies.twin_offsets``), else None

    @classmethod
    def of(cls, steps: list, n_features: int) -> Episode:
        """From ``(state, action, reward)`` steps, or ``(state, action, reward, offset)`` a twin policy's."""
        states, actions, rewards, *offsets = zip(*steps)
        return cls(np.asarray(states, np.float32).reshape(-1, n_features), np.asarray(actions, np.int64),
                   np.asarray(rewards, np.float64), np.asarray(offsets[0], np.float64) if offsets else None)


@dataclass
class Carry:
    """A group's state between updates with autoreset (a loop-carried value)."""

    envs: gym.vector.SyncVectorEnv  # autoreset disabled: finished envs are reset with seeds from rng
    rng: np.random.Generator
    obs: np.ndarray  # [n, n_features] encoded current state of every env
    partial: list  # per env: the (state, action, reward) steps of its running episode
    rounds: int = 0  # time steps this group has run (all groups run in step with each other)
    done: list = field(default_factory=list)  # (round, env, Episode) completed, not yet handed to an update

    @classmethod
    def start(cls, spec: EnvSpec, n_envs: int, seed, encode: Callable) -> Carry:
        envs, rng = vector_env(spec, n_envs), np.random.default_rng(seed)
        obs = encode(envs.reset(seed=[int(s) for s in rng.integers(0, 2**31 - 1, n_envs)])[0])
        return cls(envs, rng, obs, [[] for _ in range(n_envs)])

    def copy(self) -> Carry:
        """Environments and generator deep-copied; the recorded steps, never changed in place, shared."""
        return Carry(copy.deepcopy(self.envs), copy.deepcopy(self.rng), self.obs.copy(),
                     [list(steps) for steps in self.partial], self.rounds, list(self.done))


def init_carry(cfg: Config) -> dict | None:
    """``{"groups": a Carry per group with autoreset (None until the first update), "obs_stats"}``, or None."""
    stats = cfg.spec.new_stats()
    groups = [None] * (cfg.groups or 1) if cfg.autoreset else None
    return None if groups is None and stats is None else {"groups": groups, "obs_stats": stats}


def sampler(policy) -> Callable[[np.ndarray, np.random.Generator], tuple]:
    """``choose(states [k, F], rng) -> (actions [k], offsets)``: one batched policy forward (one job), inverse-CDF
    sampling; ``offsets`` [k, n_obs] a twin policy's (``policies.twin_offsets``), else None."""
    def choose(states: np.ndarray, rng: np.random.Generator) -> tuple:
        s = torch.from_numpy(states)
        values = policy.expectations(s)
        probs = torch.softmax(policy.readout(values), dim=-1).double().numpy()  # [k, A]
        u = rng.random(len(states))[:, None]
        return np.minimum((u > np.cumsum(probs, axis=1)).sum(axis=1), probs.shape[1] - 1), twin_offsets(policy, s, values)
    return choose


def _step(obs, action, reward, offsets, k: int) -> tuple:
    """A recorded step: ``(state, action, reward)``, and a twin policy's offset."""
    return (obs, action, reward) if offsets is None else (obs, action, reward, offsets[k])


_POOLS: dict[int, DaemonPool] = {}  # daemon threads: Ctrl-C's exit does not wait for a group's episode


def run_groups(fn: Callable, items: Sequence) -> list:
    """``[fn(item) for item in items]``, the items side by side: the first on this thread, the
    others on worker threads that share this thread's context (its job client, its usage meter) and its grad
    mode; each item's jobs are seeded as its own part (``hqflow.torch.seeded_part``)."""
    if len(items) == 1:
        return [fn(items[0])]
    workers = len(items) - 1
    if workers not in _POOLS:
        _POOLS[workers] = DaemonPool(workers, "hqflow-actor-group")
    grad = torch.is_grad_enabled()

    def call(index, ctx):  # each group counts its own jobs' seeds (seeded_part): timing changes none
        with torch.set_grad_enabled(grad):
            return ctx.run(lambda: _part(fn, items[index], index))

    futures = [_POOLS[workers].submit(call, k, contextvars.copy_context()) for k in range(1, len(items))]
    return [_part(fn, items[0], 0)] + [f.result() for f in futures]


def _part(fn: Callable, item, index: int):
    with seeded_part(index):
        return fn(item)


def _work(label: str):
    """The running fragment's ``JobClient.work(label)`` (a span of environment work), if it has a client."""
    client = current_client()
    return nullcontext() if client is None else client.work(label)


def fresh_episodes(choose: Callable, envs: FreshEnvs, n_episodes: int, seed,
                   label: str = "envs", encode: Callable | None = None) -> tuple[list[Episode], int]:
    """``n_episodes`` fresh episodes of one group, ordered by wave then env: ``(episodes, circuit rows)``; env
    work in lane ``LANE/label``; ``encode``: raw observations -> features (None: ``envs.spec.encode``)."""
    rng = np.random.default_rng(seed)
    reset_seeds = rng.integers(0, 2**31 - 1, n_episodes)
    encode, episodes, rows = encode or envs.spec.encode, [], 0
    for start in range(0, n_episodes, len(envs)):
        n = min(len(envs), n_episodes - start)
        obs = encode(envs.reset(reset_seeds[start: start + n]))
        alive, steps = np.arange(n), [[] for _ in range(n)]
        while alive.size:
            actions, offsets = choose(obs, rng)
            rows += alive.size
            with _work(label):
                raw, rewards, terminated, truncated = envs.step(alive, actions)
                done = terminated | truncated
                for k, i in enumerate(alive):
                    steps[i].append(_step(obs[k], actions[k], rewards[k], offsets, k))
                alive, obs = alive[~done], encode(raw[~done])
        episodes += [Episode.of(s, envs.spec.n_features) for s in steps]
    return episodes, rows


def continuous_episodes(choose: Callable, spec: EnvSpec, sizes: list[int], n_episodes: int, seeds: list,
                        carries: list | None, encoders: Sequence) -> tuple[list, list[Carry], int]:
    """The next ``n_episodes`` episodes of all groups, with autoreset: ``(episodes, carries, rows)``. It stops
    after the first round (every group stepped) whose completed episodes reach ``n_episodes``. ``carries``
    (one per group, None: new from ``seeds``) are copied, never changed; ``encoders``: each group's."""
    carries = [Carry.start(spec, n, seed, enc) if c is None else c.copy()  # the loop edge's value stays as it was
               for n, seed, c, enc in zip(sizes, seeds, carries or [None] * len(sizes), encoders)]
    total = lambda: sum(len(c.done) for c in carries)  # noqa: E731
    stop = [total() >= n_episodes]

    def decide():  # run by one thread once every group has finished the round
        stop[0] = total() >= n_episodes

    barrier = threading.Barrier(len(carries), action=decide)

    def run(g: int) -> int:
        c, rows = carries[g], 0
        try:
            while not stop[0]:
                actions, offsets = choose(c.obs, c.rng)
                rows += c.envs.num_envs
                with _work(f"envs{g}"):
                    raw, rewards, terminated, truncated, _ = c.envs.step(spec.env_actions(actions))
                    done = terminated | truncated
                    for i in range(c.envs.num_envs):
                        c.partial[i].append(_step(c.obs[i], actions[i], rewards[i], offsets, i))
                        if done[i]:
                            c.done.append((c.rounds, i, Episode.of(c.partial[i], spec.n_features)))
                            c.partial[i] = []
                    if done.any():  # the next episodes, seeded from the group's generator
                        raw = reset_finished(c.envs, done, c.rng)
                    c.obs = encoders[g](raw)
                c.rounds += 1
                barrier.wait()
        except threading.BrokenBarrierError:
            return rows  # another group failed: its error is the one raised
        except BaseException:
            barrier.abort()
            raise
        return rows

    rows = run_groups(run, list(range(len(carries))))
    # an env completes at most one episode a round, so (round, group, env) names each one
    pending = sorted(((r, g, i, e) for g, c in enumerate(carries) for r, i, e in c.done), key=lambda d: d[:3])
    for g, c in enumerate(carries):
        c.done = [(r, i, e) for r, owner, i, e in pending[n_episodes:] if owner == g]
    return [e for *_, e in pending[:n_episodes]], carries, sum(rows)


def as_batch(episodes: list[Episode], rows: int) -> Batch:
    """Episodes laid out one after the other (every policy row is one env step)."""
    steps = [np.concatenate([getattr(e, k) for e in episodes]) for k in ("states", "actions", "rewards")]
    offsets = np.concatenate([e.offsets for e in episodes]) if episodes and episodes[0].offsets is not None else None
    return Batch(*steps, np.array([len(e.actions) for e in episodes]), rows, rows, offsets)


@torch.no_grad()
def act(policy, envs: list[FreshEnvs], cfg: Config, step: int, carry: dict | None = None) -> tuple[Batch, dict | None]:
    """Update ``step``'s episodes: ``(batch, carry)``. Group g's fresh episodes are seeded from ``(seed, step, g)``
    (``(seed, step)`` with one group); with autoreset the groups run on from ``carry`` (first started from
    ``(seed, 7919, g)``). Running observation statistics start from the carry's, each group takes in its own,
    and they are added up in group order (``envs.ObsEncoder``)."""
    n = min(cfg.batch_episodes, cfg.max_episodes - step * cfg.batch_episodes)
    groups, choose, spec = cfg.groups or 1, sampler(policy), cfg.spec
    carry = carry or {"groups": None, "obs_stats": None}
    encoders = [ObsEncoder(spec, carry["obs_stats"]) for _ in range(groups)]
    if cfg.autoreset:
        sizes, seeds = split(cfg.num_envs or cfg.batch_episodes, groups), [[cfg.seed, 7919, g] for g in range(groups)]
        episodes, carries, rows = continuous_episodes(choose, spec, sizes, n, seeds, carry["groups"], encoders)
    else:
        quotas = split(n, groups)
        results = run_groups(lambda g: fresh_episodes(
            choose, envs[g], quotas[g], [cfg.seed, step] if groups == 1 else [cfg.seed, step, g], f"envs{g}",
            encoders[g]), list(range(groups)))
        episodes, carries, rows = [e for eps, _ in results for e in eps], None, sum(r for _, r in results)
    stats = ObsEncoder.merge(encoders[0].start, encoders)  # every group started from the same statistics
    carry = None if carries is None and stats is None else {"groups": carries, "obs_stats": stats}
    return as_batch(episodes, rows), carry


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
    log_probs = policy.log_probs(torch.from_numpy(batch.states), batch.offsets)  # [T, A] (a twin's: the QPU's as acted)
    chosen = log_probs.gather(1, torch.from_numpy(batch.actions)[:, None])[:, 0]
    loss = -(chosen * G).sum() / len(batch.lengths)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    loss = float(loss.detach())
    return {"loss": loss, "losses": {"policy_loss": loss}, "circuit_evals": batch.n_steps}, None


ALGORITHM = Algorithm("reinforce", Config, make_policy, make_optimizer, make_envs, act, learn,
                      episodes_per_update=lambda cfg: cfg.batch_episodes,
                      circuits_per_step=lambda cfg, rows: 1 + rows,  # to act, and the gradient at every state (a twin: 0)
                      init_carry=init_carry, resolve=resolve)
