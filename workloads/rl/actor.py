"""The actor's environments in G groups, so circuit jobs overlap with environment steps.

An actor's ``num_envs`` environments are split into ``groups`` groups. Each group has its
own environments and its own seeded generator, and its policy forward pass for one time
step is one job. The groups run side by side (``run_groups``): group 0 on the fragment's
thread, the others on worker threads, so while group g waits for its job on the QPU the CPU
steps the other groups' environments (double-buffered sampling, as in Sample Factory or
EnvPool's async mode). On a job backend each group's environment work is a span of its own
(lane ``cpu/0/envs1``...), so the trace shows it overlapping the jobs. Nothing depends on timing: every group's trajectories are a function
of its own seeds, so any completion order gives the same batch.

Whole episodes for the episodic algorithms (REINFORCE) come two ways:

* ``fresh_episodes`` (G = 1 gives the runner's original behaviour): each update a group
  starts its share of new episodes (in waves of its envs, ``envs.FreshEnvs``) and runs them
  to the end; jobs shrink as episodes end.
* ``continuous_episodes`` (autoreset): an environment that finishes an episode starts the
  next at once, so every job stays full; each group's environments are one gymnasium
  ``SyncVectorEnv``, and a finished one restarts with a seed from the group's generator
  (``envs.reset_finished``). The groups step in lockstep rounds, and an update takes the
  first episodes completed, by (round, group, env), so the groups stop together. Episodes
  still running, and completed ones past the update's count, carry over in each group's
  ``Carry`` (environments, partial episodes, generator): a loop-carried value, so
  checkpoints hold it and a resumed run continues bit for bit. Each update still sees
  whole episodes; an episode that spans updates was acted by the parameter versions of
  the updates it ran in.
"""
from __future__ import annotations

import concurrent.futures as cf
import contextvars
import copy
import threading
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np
import torch
from hqflow.workloads.rl.envs import EnvSpec, FreshEnvs, reset_finished, vector_env

from hqflow.jobs import current_client


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

    envs: gym.vector.SyncVectorEnv  # autoreset disabled: finished envs are reset with seeds from rng
    rng: np.random.Generator
    obs: np.ndarray  # [n, n_features] encoded current state of every env
    partial: list  # per env: ([states], [actions], [rewards]) of its running episode
    rounds: int = 0  # time steps this group has run (all groups run in step with each other)
    done: list = field(default_factory=list)  # (round, env, Episode) completed, not yet handed to an update

    def copy(self) -> Carry:
        """An independent copy: environments and generator deep-copied; the recorded steps and
        episodes, which are never changed in place, shared."""
        return Carry(copy.deepcopy(self.envs), copy.deepcopy(self.rng), self.obs.copy(),
                     [(list(s), list(a), list(r)) for s, a, r in self.partial], self.rounds, list(self.done))


ChooseFn = Callable[[np.ndarray, np.random.Generator], np.ndarray]
"""``choose(states [k, F], rng) -> actions [k]``: the policy's forward pass (one job) and sampling."""


def fresh_episodes(choose: ChooseFn, envs: FreshEnvs, n_episodes: int, seed,
                   label: str = "envs", encode: Callable | None = None) -> tuple[list[Episode], int]:
    """``n_episodes`` fresh episodes of one group, in waves of its envs, ordered by wave then env:
    ``(episodes, circuit rows)``; generator ``np.random.default_rng(seed)``. Inside a fragment with
    a job client, each time step's environment work is a span in lane ``LANE/label``. ``encode``:
    raw observations -> features (``envs.ObsEncoder``, which may keep running statistics; None:
    ``envs.spec.encode``)."""
    if n_episodes == 0:
        return [], 0
    rng = np.random.default_rng(seed)
    reset_seeds = rng.integers(0, 2**31 - 1, n_episodes)
    encode, episodes, rows = encode or envs.spec.encode, [], 0
    for start in range(0, n_episodes, len(envs)):
        n = min(len(envs), n_episodes - start)
        obs = encode(envs.reset(reset_seeds[start: start + n]))
        alive = np.arange(n)
        trace = [([], [], []) for _ in range(n)]
        while alive.size:
            actions = choose(obs, rng)
            rows += alive.size
            with _work(label):
                raw, rewards, terminated, truncated = envs.step(alive, actions)
                done = terminated | truncated
                for k, i in enumerate(alive):
                    trace[i][0].append(obs[k])
                    trace[i][1].append(actions[k])
                    trace[i][2].append(rewards[k])
                alive, obs = alive[~done], encode(raw[~done])
        episodes += [_episode(*t, envs.spec.n_features) for t in trace]
    return episodes, rows


def continuous_episodes(choose: ChooseFn, spec: EnvSpec, sizes: list[int], n_episodes: int, seeds: list,
                        carries: list | None, encoders: Sequence[Callable] | None = None
                        ) -> tuple[list[Episode], list[Carry], int]:
    """The next ``n_episodes`` whole episodes of all groups, with autoreset: ``(episodes, carries, rows)``.

    The groups run side by side in lockstep time steps (rounds): after each round, once
    every group has stepped, the update stops if the completed episodes reach
    ``n_episodes``; so no group runs ahead of the stop, and the groups finish together.
    It takes the first ``n_episodes`` in (round, group, env) order; the rest carry over.
    ``carries`` (one per group, None: new from ``seeds``) are copied, never changed.
    ``encoders``: each group's raw observations -> features (None: ``spec.encode``).
    """
    encoders = list(encoders or [spec.encode] * len(sizes))
    carries = [_new_carry(spec, n, seed, enc) if c is None else c.copy()  # the loop edge's value stays as it was
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
                actions = choose(c.obs, c.rng)
                rows += c.envs.num_envs
                with _work(f"envs{g}"):
                    raw, rewards, terminated, truncated, _ = c.envs.step(spec.env_actions(actions))
                    done = terminated | truncated
                    for i in range(c.envs.num_envs):
                        part = c.partial[i]
                        part[0].append(c.obs[i])
                        part[1].append(actions[i])
                        part[2].append(rewards[i])
                        if done[i]:
                            c.done.append((c.rounds, i, _episode(*part, spec.n_features)))
                            c.partial[i] = ([], [], [])
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


def _work(label: str):
    """The running fragment's ``JobClient.work(label)`` (a span of environment work), if it has a client."""
    client = current_client()
    return nullcontext() if client is None else client.work(label)


def _new_carry(spec: EnvSpec, n_envs: int, seed, encode: Callable) -> Carry:
    envs = vector_env(spec, n_envs)
    rng = np.random.default_rng(seed)
    obs = encode(envs.reset(seed=[int(s) for s in rng.integers(0, 2**31 - 1, n_envs)])[0])
    return Carry(envs, rng, obs, [([], [], []) for _ in range(n_envs)])


def _episode(states, actions, rewards, n_features: int) -> Episode:
    return Episode(np.asarray(states, np.float32).reshape(-1, n_features), np.asarray(actions, np.int64),
                   np.asarray(rewards, np.float64))
