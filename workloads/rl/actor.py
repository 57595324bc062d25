"""The actor's environments in G groups, so circuit jobs overlap with environment steps.

An actor's ``num_envs`` environments are split into ``groups`` groups. Each group has its
own environments and its own seeded generator, and its policy forward pass for one time
step is one job. The groups run side by side (``run_groups``): group 0 on the fragment's
thread, the others on worker threads, so while group g waits for its job on the QPU the CPU
steps the other groups' environments (double-buffered sampling, as in Sample Factory or
EnvPool's async mode). Nothing depends on timing: every group's trajectories are a function
of its own seeds, so any completion order gives the same batch.

``sample_episodes`` runs whole episodes for the episodic algorithms (REINFORCE):

* **fresh** (``autoreset=False``, G = 1 gives the runner's original behaviour): each update
  a group starts ``quota`` new episodes (in waves of its envs) and runs them to the end;
  jobs shrink as episodes end.
* **continuous** (``autoreset=True``): an environment that finishes an episode starts the
  next at once (gymnasium's autoreset), so every job stays full. An update takes the first
  ``quota`` episodes the group completes (by time step, then env index); episodes still
  running, and completed ones past the quota, carry over to the next update in the
  group's ``carry`` (environments, partial episodes and generator): a loop-carried value,
  so checkpoints hold it and a resumed run continues bit for bit. Each update still sees
  whole episodes; an episode that spans updates was acted by the parameter versions of
  the updates it ran in.
"""
from __future__ import annotations

import concurrent.futures as cf
import contextvars
import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from hqflow.workloads.rl.envs import EnvSpec, SyncEnvs


def split(n: int, parts: int) -> list[int]:
    """``n`` items over ``parts`` groups, as evenly as possible, the first groups taking the extra."""
    return [n // parts + (g < n % parts) for g in range(parts)]


_POOLS: dict[int, cf.ThreadPoolExecutor] = {}


def run_groups(fn: Callable, items: Sequence) -> list:
    """``[fn(item) for item in items]``, the items side by side: the first on this thread, the
    others on worker threads that share this thread's context (its job client) and its grad mode."""
    if len(items) == 1:
        return [fn(items[0])]
    workers = len(items) - 1
    if workers not in _POOLS:
        _POOLS[workers] = cf.ThreadPoolExecutor(workers, thread_name_prefix="hqflow-actor-group")
    grad = torch.is_grad_enabled()

    def call(item, ctx):
        with torch.set_grad_enabled(grad):
            return ctx.run(fn, item)

    futures = [_POOLS[workers].submit(call, item, contextvars.copy_context()) for item in items[1:]]
    first = fn(items[0])
    return [first] + [f.result() for f in futures]


@dataclass
class Episode:
    """One whole episode: encoded states, actions and rewards, one row per step."""

    states: np.ndarray  # [T, n_features] float32
    actions: np.ndarray  # [T] int64
    rewards: np.ndarray  # [T] float64


@dataclass
class Carry:
    """A group's state between updates in continuous mode (a loop-carried value)."""

    envs: SyncEnvs
    rng: np.random.Generator
    obs: np.ndarray  # [n, n_features] encoded current state of every env
    partial: list  # per env: ([states], [actions], [rewards]) of its running episode
    done: list = field(default_factory=list)  # completed episodes past the last quota


ChooseFn = Callable[[np.ndarray, np.random.Generator], np.ndarray]
"""``choose(states [k, F], rng) -> actions [k]``: the policy's forward pass (one job) and sampling."""


def sample_episodes(choose: ChooseFn, spec: EnvSpec, n_envs: int, quota: int, seed, autoreset: bool,
                    carry: Carry | None = None, envs: SyncEnvs | None = None) -> tuple[list[Episode], Carry | None, int]:
    """``quota`` whole episodes of one group: ``(episodes, carry, circuit rows)``; see the module docstring.

    Fresh mode uses ``envs`` (scratch environments, at least ``n_envs``) and the generator
    ``np.random.default_rng(seed)``; continuous mode starts from ``carry`` (a new one from
    ``seed`` when None) and returns the next ``carry``.
    """
    if quota == 0:
        return [], carry, 0
    if not autoreset:
        episodes, rows = _fresh(choose, envs, min(n_envs, quota), quota, seed)
        return episodes, None, rows
    return _continuous(choose, spec, n_envs, quota, seed, carry)


def _fresh(choose: ChooseFn, envs: SyncEnvs, n_envs: int, quota: int, seed) -> tuple[list[Episode], int]:
    """Fresh episodes in waves of ``n_envs``, ordered by wave then env."""
    rng = np.random.default_rng(seed)
    reset_seeds = rng.integers(0, 2**31 - 1, quota)
    encode, episodes, rows = envs.spec.encode, [], 0
    for start in range(0, quota, n_envs):
        n = min(n_envs, quota - start)
        obs = encode(envs.reset(reset_seeds[start: start + n]))
        alive = np.arange(n)
        trace = [([], [], []) for _ in range(n)]
        while alive.size:
            actions = choose(obs, rng)
            rows += alive.size
            raw, rewards, done = envs.step(alive, actions)
            for k, i in enumerate(alive):
                trace[i][0].append(obs[k])
                trace[i][1].append(actions[k])
                trace[i][2].append(rewards[k])
            alive, obs = alive[~done], encode(raw[~done])
        episodes += [_episode(*t, envs.spec.n_features) for t in trace]
    return episodes, rows


def _continuous(choose: ChooseFn, spec: EnvSpec, n_envs: int, quota: int, seed, carry: Carry | None):
    if carry is None:
        envs = SyncEnvs(spec, n_envs)
        rng = np.random.default_rng(seed)
        obs = spec.encode(envs.reset(rng.integers(0, 2**31 - 1, n_envs)))
        carry = Carry(envs, rng, obs, [([], [], []) for _ in range(n_envs)])
    else:
        carry = copy.deepcopy(carry)  # the value on the loop edge stays as it was (checkpoints, replays)
    everyone, rows = np.arange(n_envs), 0
    while len(carry.done) < quota:
        actions = choose(carry.obs, carry.rng)
        rows += n_envs
        raw, rewards, done = carry.envs.step(everyone, actions)
        for i in everyone:
            part = carry.partial[i]
            part[0].append(carry.obs[i])
            part[1].append(actions[i])
            part[2].append(rewards[i])
            if done[i]:
                carry.done.append(_episode(*part, spec.n_features))
                carry.partial[i] = ([], [], [])
                raw[i] = carry.envs.envs[i].reset(seed=int(carry.rng.integers(0, 2**31 - 1)))[0]
        carry.obs = spec.encode(raw)
    episodes, carry.done = carry.done[:quota], carry.done[quota:]
    return episodes, carry, rows


def _episode(states, actions, rewards, n_features: int) -> Episode:
    return Episode(np.asarray(states, np.float32).reshape(-1, n_features), np.asarray(actions, np.int64),
                   np.asarray(rewards, np.float64))
