"""Gymnasium environments for the quantum policies, and a tiny synchronous vector wrapper.

    spec = get_spec("cartpole")                  # EnvSpec: gym id, sizes, encode(), solved threshold
    env = make_env("cartpole", seed=0)           # one gymnasium env, reset with that seed
    envs = SyncEnvs("cartpole", 10)              # 10 envs stepped in one Python loop
    obs = envs.reset([1, 2, ..., 10])            # raw observations, one row per env
    x = spec.encode(obs)                         # [n, n_features] float32 circuit features

Encodings (``EnvSpec.encode``; the policy then multiplies each feature by its trainable λ):

* ``cartpole`` (CartPole-v1): the 4 state variables divided by [2.4, 2.5, 0.21, 2.5]
  (the TensorFlow Quantum tutorial's bounds), 4 qubits.
* ``acrobot`` (Acrobot-v1): the 6 observations [cos θ1, sin θ1, cos θ2, sin θ2, ω1, ω2]
  with the angular velocities divided by their bounds 4π and 9π, so every feature lies in
  [-1, 1]; one feature per qubit, 6 qubits (smooth in the angles, nothing dropped).
* ``frozenlake`` (FrozenLake-v1, 4x4, ``is_slippery=False``): the state index 0..15 in
  binary on 4 qubits (Skolik et al. 2022), most significant bit on qubit 0; bit b becomes
  the feature π·b, so with λ = 1 the encoding RX flips the qubit exactly where b = 1.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import gymnasium as gym
import numpy as np


def _cartpole(obs: np.ndarray) -> np.ndarray:
    return np.asarray(obs, dtype=np.float64).reshape(-1, 4) / np.array([2.4, 2.5, 0.21, 2.5])


def _acrobot(obs: np.ndarray) -> np.ndarray:
    return np.asarray(obs, dtype=np.float64).reshape(-1, 6) / np.array([1, 1, 1, 1, 4 * np.pi, 9 * np.pi])


def _frozenlake(obs: np.ndarray) -> np.ndarray:
    index = np.asarray(obs, dtype=np.int64).reshape(-1)
    bits = (index[:, None] >> np.arange(3, -1, -1)) & 1  # most significant bit first
    return np.pi * bits


@dataclass(frozen=True)
class EnvSpec:
    """How one gymnasium environment is made, sized and encoded for a circuit."""

    name: str
    """short name used by ``make_env`` and ``Config.env``"""
    gym_id: str
    """gymnasium id passed to ``gymnasium.make``"""
    kwargs: tuple[tuple[str, object], ...]
    """extra ``gymnasium.make`` keyword arguments, as (name, value) pairs (hashable)"""
    n_features: int
    """features per state after ``encode``"""
    n_qubits: int
    """qubits of the default policy circuit (one feature per qubit)"""
    n_actions: int
    """size of the discrete action space"""
    solved: float
    """an agent is solved when the mean return of its last 10 episodes reaches this"""
    _encode: Callable[[np.ndarray], np.ndarray]

    def encode(self, obs) -> np.ndarray:
        """Raw observations (one or a stack of them) -> features ``[n, n_features]`` float32."""
        return self._encode(obs).astype(np.float32)

    def make(self) -> gym.Env:
        return gym.make(self.gym_id, **dict(self.kwargs))


SPECS: dict[str, EnvSpec] = {
    "cartpole": EnvSpec("cartpole", "CartPole-v1", (), 4, 4, 2, 500.0, _cartpole),
    "acrobot": EnvSpec("acrobot", "Acrobot-v1", (), 6, 6, 3, -100.0, _acrobot),
    # the lake is deterministic, so a solved policy reaches the goal (reward 1) every episode
    "frozenlake": EnvSpec("frozenlake", "FrozenLake-v1", (("map_name", "4x4"), ("is_slippery", False)),
                          4, 4, 4, 1.0, _frozenlake),
}


def get_spec(name: str) -> EnvSpec:
    """The ``EnvSpec`` registered as ``name`` (``ValueError`` naming the known ones)."""
    if name not in SPECS:
        raise ValueError(f"unknown environment {name!r}; known: {', '.join(sorted(SPECS))}")
    return SPECS[name]


def make_env(name: str, seed: int | None = None) -> gym.Env:
    """One gymnasium env for ``name``, reset once with ``seed`` (its action space seeded too)."""
    env = get_spec(name).make()
    env.reset(seed=seed)
    env.action_space.seed(seed)
    return env


class SyncEnvs:
    """``n`` copies of one environment, stepped in a plain loop (no autoreset, no subprocesses).

    Each env runs one episode between ``reset`` calls; ``step`` takes the indices of the
    envs still running, so finished episodes stay finished.
    """

    def __init__(self, name_or_spec: str | EnvSpec, n: int):
        self.spec = get_spec(name_or_spec) if isinstance(name_or_spec, str) else name_or_spec
        if n < 1:
            raise ValueError(f"need at least one env, got {n}")
        self.envs = [self.spec.make() for _ in range(n)]

    def __len__(self) -> int:
        return len(self.envs)

    def reset(self, seeds: Sequence[int]) -> np.ndarray:
        """Reset the first ``len(seeds)`` envs with those seeds: raw observations ``[len(seeds), ...]``."""
        if len(seeds) > len(self.envs):
            raise ValueError(f"{len(seeds)} seeds for {len(self.envs)} envs")
        return np.stack([np.asarray(self.envs[i].reset(seed=int(s))[0]) for i, s in enumerate(seeds)])

    def step(self, index: Sequence[int], actions: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Step env ``index[k]`` with ``actions[k]``: (observations, rewards, done), one row per k."""
        obs, rew, done = [], np.empty(len(index)), np.empty(len(index), dtype=bool)
        for k, (i, a) in enumerate(zip(index, actions)):
            o, r, terminated, truncated, _ = self.envs[i].step(int(a))
            obs.append(o)
            rew[k], done[k] = r, terminated or truncated
        return np.stack([np.asarray(o) for o in obs]), rew, done

    def close(self) -> None:
        for env in self.envs:
            env.close()


__all__ = ["SPECS", "EnvSpec", "SyncEnvs", "get_spec", "make_env"]
