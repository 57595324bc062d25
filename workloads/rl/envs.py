"""Gymnasium environments for the quantum policies, on gymnasium's vector API.

    spec = get_spec("cartpole")                  # EnvSpec: gym id, sizes, encode(), solved threshold
    envs = vector_env("cartpole", 10)            # SyncVectorEnv, autoreset disabled (``reset_finished``)
    obs, _ = envs.reset(seed=[1, 2, ..., 10])    # raw observations, one row per env
    x = spec.encode(obs)                         # [n, n_features] float32 circuit features

The short names (``SHORT_NAMES``, fixed) have their own encodings (``_SHORT``). Any registered gymnasium id works
too, and a user's own: ``"MODULE:ID"`` imports MODULE, which registers ID, in every process that makes the env, and
an id nothing registered yet is looked for in installed packages' entry points (``load_plugin_envs``). Their encoding
follows the observation space, one feature per qubit: a ``Box`` onto [-1, 1] (``BoxEncoder``, or with running
statistics ``RunningBoxEncoder``), a ``Discrete(n)`` in binary (``BinaryEncoder``) or one-hot. Actions are
``Discrete``, or a bounded ``Box`` of shape ``[d]`` (PPO's Gaussian head); anything else is a ``ValueError``. The
README's "Environments" says more, and why ``auto`` is ``box``, not ``running``, for a Box (measured).
"""
from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import importlib
import math
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from types import MappingProxyType

import gymnasium as gym
import numpy as np
from gymnasium.wrappers.utils import update_mean_var_count_from_moments


@dataclass(frozen=True)
class EnvSpec:
    """How one gymnasium environment is made, sized and encoded for a circuit: ``name`` (what ``make_env`` and
    ``Config.env`` take), ``gym_id`` and ``kwargs`` (``gymnasium.make``'s, as hashable (name, value) pairs),
    ``n_features`` (per state after ``encode``), ``n_qubits`` (of the default circuit, one feature per qubit),
    ``n_actions`` (discrete actions, or dimensions of continuous ones), ``solved`` (an agent is solved when the mean
    return of its last 10 episodes reaches it), ``action_low``/``action_high`` (continuous actions: a Box's bounds,
    one per dimension; None: discrete), ``obs_encoding`` (as ``get_spec`` takes it; "auto" only for a short name's)."""

    name: str
    gym_id: str
    kwargs: tuple[tuple[str, object], ...]
    n_features: int
    n_qubits: int
    n_actions: int
    solved: float
    _encode: Callable[[np.ndarray], np.ndarray]
    action_low: tuple[float, ...] | None = None
    action_high: tuple[float, ...] | None = None
    obs_encoding: str = "auto"

    @property
    def continuous(self) -> bool:
        return self.action_low is not None

    def env_action(self, a):
        """The env's action for a policy action: an index, or a point of [-1, 1]^d scaled onto the Box (clipped)."""
        if not self.continuous:
            return int(a)
        low, high = np.array(self.action_low), np.array(self.action_high)
        x = np.clip(np.asarray(a, dtype=np.float64).reshape(len(low)), -1.0, 1.0)
        return (low + (x + 1.0) / 2.0 * (high - low)).astype(np.float32)

    def env_actions(self, actions) -> list:
        return [self.env_action(a) for a in actions]

    def encode(self, obs, stats: ObsStats | None = None) -> np.ndarray:
        """Raw observations (one or a stack of them) -> features ``[n, n_features]`` float32; ``stats``:
        the running statistics of a ``running`` encoding (None: the ones it holds, else none seen yet)."""
        return (self._encode(obs) if stats is None else self._encode(obs, stats)).astype(np.float32)

    @property
    def running(self) -> bool:
        """Whether the encoding keeps running statistics (some coordinates of a Box are unbounded)."""
        return isinstance(self._encode, RunningBoxEncoder) and self._encode.n_running > 0

    def new_stats(self) -> ObsStats | None:
        """The running statistics before any observation (None: the encoding keeps none)."""
        return ObsStats.start(self._encode.n_running) if self.running else None

    def with_stats(self, stats: ObsStats | None) -> EnvSpec:
        """This spec with its running statistics frozen at ``stats`` (what a trained policy is evaluated with)."""
        if not self.running or stats is None:
            return self
        return dataclasses.replace(self, _encode=dataclasses.replace(self._encode, stats=stats))

    def make(self) -> gym.Env:
        return gym.make(self.gym_id, **dict(self.kwargs))

    def max_episode_steps(self) -> int | None:
        """The registered time limit (None: none)."""
        return gym.spec(self.gym_id.rpartition(":")[2]).max_episode_steps


OBS_ENCODINGS = ("auto", "box", "running", "binary", "onehot")
AUTO_BOX = "box"  # what auto gives a Box that is not a short name's: not running (measured: README)


def get_spec(name: str, encoding: str = "auto") -> EnvSpec:
    """The ``EnvSpec`` of a short name or of any registered gymnasium id, ``"module:Id"`` for one that ``module``
    registers (``ValueError`` otherwise). ``encoding`` (``OBS_ENCODINGS``; module docstring): "auto" is a short
    name's own encoding, else ``AUTO_BOX`` for a Box and "binary" for a Discrete."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"an environment is a short name or a gymnasium id, got {name!r}")
    if encoding not in OBS_ENCODINGS:
        raise ValueError(f"unknown observation encoding {encoding!r}; known: {', '.join(OBS_ENCODINGS)}")
    if name not in _SHORT or encoding == "auto":
        return _SHORT[name] if name in _SHORT else _from_gym(name, encoding)
    base = _SHORT[name]  # a short name with another encoding: its environment, encoded by the space
    return dataclasses.replace(_from_gym(base.gym_id, encoding, base.kwargs), name=name, solved=base.solved)


def _bounded(low, high) -> np.ndarray:
    """Which coordinates of a Box have bounds to scale from: finite, below float32's largest value (which
    many environments write for "unbounded"), and high > low."""
    low, high = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
    huge = float(np.finfo(np.float32).max)
    return np.isfinite(low) & np.isfinite(high) & (np.abs(low) < huge) & (np.abs(high) < huge) & (high > low)


def legacy_encoding(name: str, encoding: str) -> str:
    """The encoding a run recorded as ``encoding`` was trained with: "auto" from before runs recorded the
    encoding it stood for meant "box" for a Box that is not a short name's, whatever "auto" means now."""
    if encoding != "auto" or name in _SHORT:
        return encoding
    return "box" if get_spec(name).obs_encoding in ("box", "running") else encoding


@dataclass(frozen=True)
class BoxEncoder:
    """A ``Box`` observation onto [-1, 1] per coordinate: by its bounds, or ``2/π·arctan`` if unbounded."""

    low: tuple[float, ...]
    high: tuple[float, ...]

    def __call__(self, obs) -> np.ndarray:
        x = np.asarray(obs, dtype=np.float64).reshape(-1, len(self.low))
        low, high = np.array(self.low), np.array(self.high)
        finite = _bounded(low, high)
        out = np.arctan(x) * (2 / np.pi)
        out[:, finite] = 2 * (x[:, finite] - low[finite]) / (high[finite] - low[finite]) - 1
        return out


@dataclass(frozen=True, eq=False)
class ObsStats:
    """Running mean and variance of some observation coordinates, as gymnasium's ``RunningMeanStd`` keeps them
    (float64; ``merged``, a new one, is its update: Chan et al.'s parallel algorithm). ``start``: before any
    observation (mean 0, variance 1, count 1e-4: gymnasium's); ``nothing``: no observations (count 0: merging it
    changes nothing); ``of(x)``: the mean and (population) variance of the rows of ``x`` ``[k, n]``."""

    mean: np.ndarray
    var: np.ndarray
    count: float

    @classmethod
    def start(cls, n: int) -> ObsStats:
        return cls(np.zeros(n), np.ones(n), 1e-4)

    @classmethod
    def nothing(cls, n: int) -> ObsStats:
        return cls(np.zeros(n), np.zeros(n), 0.0)

    @classmethod
    def of(cls, x) -> ObsStats:
        x = np.asarray(x, dtype=np.float64)
        return cls(x.mean(axis=0), x.var(axis=0), float(len(x))) if len(x) else cls.nothing(x.shape[1])

    def merged(self, other: ObsStats) -> ObsStats:
        if other.count == 0 or self.count == 0:
            return self if other.count == 0 else other
        return ObsStats(*update_mean_var_count_from_moments(self.mean, self.var, self.count, other.mean, other.var,
                                                            other.count))


RUNNING_CLIP = 3.0
"""A normalized coordinate z = (x - mean) / sqrt(var + 1e-8) becomes the feature clip(z, -3, 3) / 3."""


@dataclass(frozen=True)
class RunningBoxEncoder:
    """A ``Box`` observation onto [-1, 1] per coordinate: by its bounds where it has them, else by running statistics
    (``RUNNING_CLIP``): those ``unbounded`` (their indices; ``observed``: these coordinates of raw observations,
    ``[k, n_running]`` float64); ``stats``: frozen ones (a trained policy's); None, with none passed: none seen yet."""

    low: tuple[float, ...]
    high: tuple[float, ...]
    stats: ObsStats | None = None

    @property
    def unbounded(self) -> np.ndarray:
        return np.flatnonzero(~_bounded(self.low, self.high))

    @property
    def n_running(self) -> int:
        return len(self.unbounded)

    def observed(self, obs) -> np.ndarray:
        return np.asarray(obs, dtype=np.float64).reshape(-1, len(self.low))[:, self.unbounded]

    def __call__(self, obs, stats: ObsStats | None = None) -> np.ndarray:
        stats = stats or self.stats or ObsStats.start(self.n_running)
        x = np.asarray(obs, dtype=np.float64).reshape(-1, len(self.low))
        out = BoxEncoder(self.low, self.high)(x)
        z = (x[:, self.unbounded] - stats.mean) / np.sqrt(stats.var + 1e-8)
        out[:, self.unbounded] = np.clip(z, -RUNNING_CLIP, RUNNING_CLIP) / RUNNING_CLIP
        return out


class ObsEncoder:
    """An actor's encoding of observations (``encode(raw) -> features``). With running statistics (``spec.running``)
    every batch first updates them, then is normalized by them, as gymnasium's ``NormalizeObservation`` does. They
    are ``start`` (the actor's carry's, so checkpoints hold them and a resumed run goes on bit for bit; None:
    ``spec.new_stats()``) merged with what this encoder took in (``seen``), so groups running side by side each see
    their own; ``merge`` adds them up in a fixed order. A trained policy's are frozen (``EnvSpec.with_stats``)."""

    def __init__(self, spec: EnvSpec, start: ObsStats | None = None):
        self.spec = spec
        self.start = (spec.new_stats() if start is None else start) if spec.running else None
        self.seen = None if self.start is None else ObsStats.nothing(spec._encode.n_running)

    def __call__(self, raw) -> np.ndarray:
        if self.start is None:
            return self.spec.encode(raw)
        self.seen = self.seen.merged(ObsStats.of(self.spec._encode.observed(raw)))
        return self.spec.encode(raw, self.start.merged(self.seen))

    @staticmethod
    def merge(start: ObsStats | None, encoders: Sequence[ObsEncoder]) -> ObsStats | None:
        """``start`` updated with what each encoder took in, in their order (None: no statistics kept)."""
        return None if start is None else functools.reduce(ObsStats.merged, [enc.seen for enc in encoders], start)


@dataclass(frozen=True)
class BinaryEncoder:
    """A ``Discrete(n)`` observation as its index in binary, most significant bit on qubit 0, bit b -> π·b (with
    λ = 1 the encoding RX flips the qubit exactly where b = 1)."""

    n: int
    start: int = 0

    @property
    def bits(self) -> int:
        return max(1, math.ceil(math.log2(self.n)))

    def __call__(self, obs) -> np.ndarray:
        index = np.asarray(obs, dtype=np.int64).reshape(-1) - self.start
        return np.pi * ((index[:, None] >> np.arange(self.bits - 1, -1, -1)) & 1)


@dataclass(frozen=True)
class OneHotEncoder:
    """A ``Discrete(n)`` observation as n features, π at its index and 0 elsewhere."""

    n: int
    start: int = 0

    def __call__(self, obs) -> np.ndarray:
        index = np.asarray(obs, dtype=np.int64).reshape(-1) - self.start
        return np.pi * (index[:, None] == np.arange(self.n))


@dataclass(frozen=True)
class ScaledEncoder:
    """A ``Box`` observation with each coordinate divided by a fixed bound (the short names' own encodings)."""

    scale: tuple[float, ...]

    def __call__(self, obs) -> np.ndarray:
        return np.asarray(obs, dtype=np.float64).reshape(-1, len(self.scale)) / np.array(self.scale)


_SHORT: Mapping[str, EnvSpec] = MappingProxyType({
    "cartpole": EnvSpec("cartpole", "CartPole-v1", (), 4, 4, 2, 500.0, ScaledEncoder((2.4, 2.5, 0.21, 2.5))),
    "acrobot": EnvSpec("acrobot", "Acrobot-v1", (), 6, 6, 3, -100.0,
                       ScaledEncoder((1.0, 1.0, 1.0, 1.0, 4 * np.pi, 9 * np.pi))),
    # the lake is deterministic, so a solved policy reaches the goal (reward 1) every episode
    "frozenlake": EnvSpec("frozenlake", "FrozenLake-v1", (("map_name", "4x4"), ("is_slippery", False)),
                          4, 4, 4, 1.0, BinaryEncoder(16)),
})
_cartpole, _acrobot, _frozenlake = (_SHORT[k].encode for k in ("cartpole", "acrobot", "frozenlake"))  # old checkpoints
SHORT_NAMES: tuple[str, ...] = tuple(sorted(_SHORT))
"""hqflow's own short names, each with its encoding (fixed: your own environment is named ``MODULE:ID``)"""


PLUGIN_GROUP = "gymnasium.envs"  # the entry-point group of packages that register gymnasium environments
_PLUGINS_LOADED: set[tuple[str, str]] = set()
_PLUGINS_LOCK = threading.Lock()


def load_plugin_envs() -> list[str]:
    """Register the environments of every installed package's ``PLUGIN_GROUP`` entry point not loaded yet in this
    process, as gymnasium 0.26-0.29 did on import (1.x no longer does, so ``get_spec`` calls this for an id nobody
    registered yet): the entry point's name is the namespace of the ids it registers (``__root__``: none, ``mypkg``:
    ``mypkg/Env-v0``), its value a function that registers them (``mypkg.envs:register_envs``) or a module that does
    on import. Returns what failed, one short line each (the others still load)."""
    failed = []
    with _PLUGINS_LOCK:
        for ep in entry_points(group=PLUGIN_GROUP):
            if (ep.name, ep.value) in _PLUGINS_LOADED:
                continue
            _PLUGINS_LOADED.add((ep.name, ep.value))
            root = ep.name in ("__root__", "__internal__")
            try:
                with contextlib.nullcontext() if root else gym.envs.registration.namespace(ep.name):
                    target = ep.load()
                    if callable(target):
                        target()
            except Exception as exc:  # a broken plugin must not hide the others
                line = (str(exc).splitlines() or [""])[0][:200]
                failed.append(f"{ep.name} = {ep.value} failed: {type(exc).__name__}: {line}")
    return failed


class EnvImportError(ValueError):
    """A ``MODULE:ID`` environment whose module cannot be imported here (not a fault of the run that names it)."""


def registered_by(module: str) -> list[str]:
    """The gymnasium ids whose entry point lives in ``module`` (or a module under it), sorted."""
    def of(entry) -> str:
        return entry.partition(":")[0] if isinstance(entry, str) else getattr(entry, "__module__", "") or ""

    return sorted(i for i, s in gym.registry.items() if (of(s.entry_point) + ".").startswith(module + "."))


def close_matches(name: str) -> list[str]:
    """Short names and registered ids that ``name`` may have meant: the same name but for case, version and
    separators first (short names, then the newest version), else close spellings."""
    def bare(text: str) -> str:
        return re.sub(r"[-_/ ]", "", re.sub(r"-v\d+$", "", text.lower().rpartition(":")[2]))

    def version(text: str) -> int:
        found = re.search(r"-v(\d+)$", text)
        return int(found.group(1)) if found else 0

    candidates = set(_SHORT) | set(gym.registry)
    exact = sorted((c for c in candidates if bare(c) == bare(name)), key=lambda c: (c not in _SHORT, -version(c), c))
    if exact:
        return exact[:3]
    folded = {c.lower(): c for c in sorted(candidates)}
    return [folded[m] for m in difflib.get_close_matches(name.lower(), list(folded), n=3, cutoff=0.75)]


@functools.lru_cache(maxsize=64)
def _from_gym(name: str, encoding: str = "auto", kwargs: tuple = ()) -> EnvSpec:
    module, _, env_id = name.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise EnvImportError(f"environment {name!r}: cannot import {module!r} ({exc}); run hqflow from the "
                                 "folder that holds it, or put it on PYTHONPATH") from None
    failed = [] if env_id in gym.registry else load_plugin_envs()  # one a package's entry point registers
    try:
        gym_spec = gym.spec(env_id)
    except gym.error.Error as exc:
        if module:  # the module imported, and registered something else
            own = registered_by(module)
            listed = f"it registered {', '.join(own)}" if own else "it registered no gymnasium environment"
            raise ValueError(f"unknown environment {name!r}: module {module!r} registered no id {env_id!r}; "
                             f"{listed}") from None
        hint = f" ({exc})" if "version" in str(exc).lower() else ""  # gymnasium names the current version
        if failed:
            hint += f" (the {PLUGIN_GROUP} entry point{'s' if len(failed) > 1 else ''} {'; '.join(failed)})"
        guess = f" (did you mean {' or '.join(near)}?)" if (near := close_matches(name)) else ""
        known = ", ".join(SHORT_NAMES)
        raise ValueError(f"unknown environment {name!r}{guess}: not a short name ({known}) nor a registered gymnasium "
                         f"id{hint}; for your own, give MODULE:ID or --env-module MODULE (MODULE registering ID), "
                         f"or install a package registering it through a {PLUGIN_GROUP!r} entry point") from None
    try:
        env = gym.make(name, **dict(kwargs))
    except Exception as exc:  # a missing extra (box2d, mujoco, ...) or the env's own failure
        raise ValueError(f"environment {name!r} cannot be made: {type(exc).__name__}: {exc}") from None
    try:
        obs_space, act_space = env.observation_space, env.action_space
    finally:
        env.close()
    encode, n_features = _encoder(name, obs_space, encoding)
    kind = {BoxEncoder: "box", RunningBoxEncoder: "running", BinaryEncoder: "binary"}.get(type(encode), "onehot")
    solved = float(gym_spec.reward_threshold if gym_spec.reward_threshold is not None else math.inf)
    if isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1 and act_space.shape[0] >= 1 \
            and np.all(np.isfinite(act_space.low)) and np.all(np.isfinite(act_space.high)):
        low, high = (tuple(float(v) for v in b) for b in (act_space.low, act_space.high))
        return EnvSpec(name, name, kwargs, n_features, max(n_features, len(low)), len(low), solved, encode, low, high,
                       kind)
    if not isinstance(act_space, gym.spaces.Discrete) or int(act_space.start) != 0:
        raise ValueError(f"environment {name!r} has action space {_describe(act_space)}; supported: Discrete(n) "
                         "(from 0), and a bounded Box of shape [d] (with --algo ppo)")
    return EnvSpec(name, name, kwargs, n_features, n_features, int(act_space.n), solved, encode, obs_encoding=kind)


def _describe(space) -> str:
    """A space in one short line (numpy's repr of wide bounds spans several)."""
    if isinstance(space, gym.spaces.Box):
        return f"Box(shape={tuple(space.shape)}, dtype={space.dtype})"
    if isinstance(space, gym.spaces.Discrete):
        return f"Discrete({space.n})" if int(space.start) == 0 else f"Discrete({space.n}, start={space.start})"
    return " ".join(str(space).split())[:120]


def _encoder(name: str, space, encoding: str = "auto") -> tuple[Callable, int]:
    where = f"environment {name!r} has observation space {_describe(space)}"
    if isinstance(space, gym.spaces.Box) and len(space.shape) == 1 and space.shape[0] >= 1:
        if encoding not in ("auto", "box", "running"):
            raise ValueError(f"{where}: encoding {encoding!r} is for Discrete observations; use box, running or auto")
        low, high = (tuple(float(v) for v in np.broadcast_to(b, space.shape)) for b in (space.low, space.high))
        kind = RunningBoxEncoder if (AUTO_BOX if encoding == "auto" else encoding) == "running" else BoxEncoder
        return kind(low, high), space.shape[0]
    if isinstance(space, gym.spaces.Discrete) and space.n >= 2:
        if encoding in ("box", "running"):
            raise ValueError(f"{where}: encoding {encoding!r} is for Box observations; use binary, onehot or auto")
        if encoding == "onehot":
            return OneHotEncoder(int(space.n), int(space.start)), int(space.n)
        enc = BinaryEncoder(int(space.n), int(space.start))
        return enc, enc.bits
    raise ValueError(f"{where}; supported: Box of shape [n], Discrete(n)")


def make_env(name: str, seed: int | None = None) -> gym.Env:
    """One gymnasium env for ``name``, reset once with ``seed`` (its action space seeded too)."""
    env = get_spec(name).make()
    env.reset(seed=seed)
    env.action_space.seed(seed)
    return env


def vector_env(name_or_spec: str | EnvSpec, n: int) -> gym.vector.SyncVectorEnv:
    """``n`` copies of the environment in gymnasium's ``SyncVectorEnv``, ``AutoresetMode.DISABLED``: the actors
    reset a finished env with a seed of their own (``reset_finished``; gymnasium's other modes reset unseeded)."""
    spec = get_spec(name_or_spec) if isinstance(name_or_spec, str) else name_or_spec
    if n < 1:
        raise ValueError(f"need at least one env, got {n}")
    return gym.vector.SyncVectorEnv([spec.make] * n, autoreset_mode=gym.vector.AutoresetMode.DISABLED)


def reset_finished(envs: gym.vector.SyncVectorEnv, done: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Reset the envs where ``done``, each with a seed drawn from ``rng`` (one draw per env, in env
    order), through the vector API's ``reset_mask``: every env's observation, the others' unchanged."""
    seeds = [int(rng.integers(0, 2**31 - 1)) if d else None for d in done]
    return envs.reset(seed=seeds, options={"reset_mask": np.asarray(done, dtype=bool)})[0]


class FreshEnvs:
    """``n`` environments (a ``vector_env``) for fresh episodes: each runs one episode between ``reset`` calls, and
    one whose episode ended stays ended while the others run on: ``step`` steps only the envs it names (the vector
    API steps them all); resets go through the vector API (``reset_mask`` for the first ``len(seeds)``)."""

    def __init__(self, name_or_spec: str | EnvSpec, n: int):
        self.spec = get_spec(name_or_spec) if isinstance(name_or_spec, str) else name_or_spec
        self.vector = vector_env(self.spec, n)
        self._started = False

    def __len__(self) -> int:
        return self.vector.num_envs

    def reset(self, seeds: Sequence[int]) -> np.ndarray:
        """Reset the first ``len(seeds)`` envs with those seeds: raw observations ``[len(seeds), ...]``."""
        n, k = len(self), len(seeds)
        if k > n:
            raise ValueError(f"{k} seeds for {n} envs")
        if k == n or not self._started:  # the first starts every env: the vector batches all their observations
            self._started = True
            return self.vector.reset(seed=[int(s) for s in seeds] + [0] * (n - k))[0][:k]
        mask = np.arange(n) < k
        return self.vector.reset(seed=[int(s) for s in seeds] + [None] * (n - k), options={"reset_mask": mask})[0][:k]

    def step(self, index: Sequence[int], actions: Sequence) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Step env ``index[k]`` with ``actions[k]``: (observations, rewards, terminated, truncated), a row per k."""
        obs, rew = [], np.empty(len(index))
        terminated, truncated = np.empty(len(index), dtype=bool), np.empty(len(index), dtype=bool)
        for k, (i, a) in enumerate(zip(index, actions)):
            o, rew[k], terminated[k], truncated[k], _ = self.vector.envs[i].step(self.spec.env_action(a))
            obs.append(np.asarray(o))
        return np.stack(obs), rew, terminated, truncated

    def close(self) -> None:
        self.vector.close()


__all__ = ["AUTO_BOX", "OBS_ENCODINGS", "PLUGIN_GROUP", "SHORT_NAMES", "EnvSpec", "FreshEnvs", "ObsEncoder", "ObsStats",
           "get_spec", "load_plugin_envs", "make_env", "reset_finished", "vector_env"]
