"""Replicas of a ``learn`` fragment and the reduction between them (the ``multi-learner`` policy's collective).

With ``SchedulerConfig(learners=L)`` each ``learn`` instance runs as L replicas, and the scheduler keeps
rank 0's outputs. A replica reads who it is with :func:`replica` and combines arrays with :func:`reduce`;
outside replicas ``replica()`` is None and ``reduce`` hands its arrays back.

The reduction is a star over a :class:`Rendezvous` (in this process, or in a Ray actor under ``ray``): once
all L ranks have contributed under a group key, it combines them in rank order, so every rank gets the same
bits, run after run. A contribution is idempotent, so a replica that Ray restarted may redo its step. (Ray's
gloo collectives are faster, but a peer that dies inside one blocks the others until gloo's timeout; here
nothing waits on a process, only on a key.)

Ops per array: ``"sum"`` (in rank order) or ``"first"`` (rank 0's, for values every rank computed alike).
A ``None`` array (a gradient a rank did not get) is absent: the sum is over the ranks that have one, None
when none has. A :class:`Sparse` contribution (see :class:`Compression`) counts as its dense array.
"""
from __future__ import annotations

import contextvars
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..common.remote import Remote

OPS = ("sum", "first")
TIMEOUT = 600.0
"""seconds a rank waits for its peers before the reduction fails"""


class CollectiveError(RuntimeError):
    """A reduction that cannot finish: a peer failed (the group was aborted) or never came."""


class Rendezvous:
    """Contributions by group and rank; each group's result once every rank has contributed. Thread-safe."""

    def __init__(self):
        self._cond = threading.Condition()
        self._parts: dict[str, dict[int, list]] = {}
        self._done: dict[str, list] = {}
        self._aborted: dict[str, str] = {}
        self.bytes_moved = 0

    def reduce(self, group: str, rank: int, size: int, arrays: list, ops: list[str],
               timeout: float = TIMEOUT) -> list:
        """Contribute ``arrays`` as ``rank`` of ``size`` and wait for the group's result."""
        deadline = time.monotonic() + timeout
        with self._cond:
            if group not in self._done:
                parts = self._parts.setdefault(group, {})
                if rank not in parts:  # a redo adds nothing
                    parts[rank] = list(arrays)
                    self.bytes_moved += _nbytes(arrays)
                if len(parts) == size:
                    self._done[group] = _combine([self._parts[group][r] for r in range(size)], ops)
                    del self._parts[group]
                    self._cond.notify_all()
            while group not in self._done:
                why = self._why_aborted(group)
                if why is not None:
                    raise CollectiveError(why)
                left = deadline - time.monotonic()
                if left <= 0:
                    have = sorted(self._parts.get(group, {}))
                    raise CollectiveError(f"reduction {group!r}: ranks {have} of {size} came within {timeout:g} s")
                self._cond.wait(left)
            self.bytes_moved += _nbytes(self._done[group])
            return self._done[group]

    def _why_aborted(self, group: str) -> str | None:
        return next((why for prefix, why in self._aborted.items() if group.startswith(prefix)), None)

    def abort(self, prefix: str, why: str) -> None:
        """Fail every reduction whose group starts with ``prefix``, now and later (a replica failed)."""
        with self._cond:
            self._aborted[prefix] = why
            self._cond.notify_all()

    def forget(self, prefix: str) -> None:
        """Drop the groups under ``prefix`` (every replica of that instance has returned)."""
        with self._cond:
            for table in (self._parts, self._done, self._aborted):
                for key in [k for k in table if k.startswith(prefix)]:
                    del table[key]

    def traffic(self) -> int:
        """Bytes of arrays contributed and handed back so far (a redone contribution: once)."""
        return self.bytes_moved


def _nbytes(arrays: list) -> int:
    return sum(a.nbytes for a in arrays if a is not None)


@dataclass(frozen=True)
class Sparse:
    """A flat array of ``size`` float64 zeros but at ``index`` (int32), where it holds ``value`` (float32)."""

    index: np.ndarray
    value: np.ndarray
    size: int

    @property
    def nbytes(self) -> int:
        return self.index.nbytes + self.value.nbytes

    def dense(self) -> np.ndarray:
        out = np.zeros(self.size)
        out[self.index] = self.value
        return out


def _dense(a):
    return a.dense() if isinstance(a, Sparse) else a


def _combine(parts: list[list], ops: list[str]) -> list:
    out = []
    for i, op in enumerate(ops):
        have = [_dense(p[i]) for p in parts if p[i] is not None]
        if not have:
            out.append(None)
        elif op == "first":
            out.append(_dense(parts[0][i]) if parts[0][i] is not None else have[0])
        else:
            total = np.array(have[0], dtype=np.float64)
            for a in have[1:]:
                total += a  # in rank order
            out.append(total)
    return out


COMPRESSIONS = ("none", "topk", "float16")


@dataclass(frozen=True)
class Compression:
    """How a replica compresses each gradient it contributes (``hqflow.torch.ReducedGradients`` applies it,
    with error feedback: what compression drops is added to the replica's next contribution)."""

    kind: str = "none"
    """``none``: float64 as computed; ``topk``: the ``ratio`` largest entries by magnitude (float32 values at
    int32 indices); ``float16``: a quarter of the bytes"""
    ratio: float = 0.1
    """with ``topk``: the share of entries sent (0 < ratio <= 1)"""

    def __post_init__(self):
        if self.kind not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {', '.join(COMPRESSIONS)}, got {self.kind!r}")
        if isinstance(self.ratio, bool) or not isinstance(self.ratio, (int, float)) or not 0 < self.ratio <= 1:
            raise ValueError(f"compression ratio must be a number in (0, 1], got {self.ratio!r}")

    @classmethod
    def parse(cls, text: str) -> Compression:
        """``none``, ``float16``, ``topk`` or ``topk:RATIO`` (a command line's form)."""
        kind, _, ratio = str(text).partition(":")
        if ratio and kind != "topk":
            raise ValueError(f"only topk takes a ratio (topk:0.1), got {text!r}")
        try:
            return cls(kind, float(ratio)) if ratio else cls(kind)
        except ValueError as exc:
            if "could not convert" in str(exc):
                raise ValueError(f"compression ratio must be a number in (0, 1], got {ratio!r}") from None
            raise

    def encode(self, grad: np.ndarray, residual: np.ndarray | None) -> tuple[Any, np.ndarray | None]:
        """``(what to send, the new residual)`` for a flat float64 gradient."""
        if self.kind == "none":
            return grad, None
        g = grad if residual is None else grad + residual
        if self.kind == "float16":
            sent = g.astype(np.float16)
            return sent, g - sent.astype(np.float64)
        k = max(1, int(np.ceil(self.ratio * g.size)))
        index = np.argpartition(np.abs(g), g.size - k)[g.size - k:].astype(np.int32)
        value = g[index].astype(np.float32)
        left = g.copy()
        left[index] -= value.astype(np.float64)
        return Sparse(np.sort(index), value[np.argsort(index)], g.size), left


@dataclass(frozen=True)
class Replica:
    """Who a replica is: ``rank`` of ``size`` for the fragment instance ``group`` (``stream/step``: the
    run and fragment, then the step); ``comm`` reduces; ``compression`` is how to contribute."""

    rank: int
    size: int
    group: str
    comm: Any
    compression: Compression = Compression()

    @property
    def stream(self) -> str:
        """The group without its step: the same for every step of one fragment in one run."""
        return self.group.rsplit("/", 1)[0]


_CURRENT: contextvars.ContextVar[Replica | None] = contextvars.ContextVar("hqflow_replica", default=None)


def replica() -> Replica | None:
    """The replica this fragment call is, or None when it is not replicated."""
    return _CURRENT.get()


@contextmanager
def as_replica(rep: Replica | None):
    """Run the body as replica ``rep`` (the executors wrap a replicated fragment call in it)."""
    token = _CURRENT.set(rep)
    try:
        yield rep
    finally:
        _CURRENT.reset(token)


def reduce(arrays: list, ops: list[str] | str = "sum", key: str = "") -> list:
    """Combine ``arrays`` (numpy arrays or None) across this fragment's replicas, per op (see the module
    docstring); ``key`` tells apart several reductions in one call (the same on every rank)."""
    ops = [ops] * len(arrays) if isinstance(ops, str) else list(ops)
    if len(ops) != len(arrays) or any(op not in OPS for op in ops):
        raise ValueError(f"reduce needs one op of {OPS} per array, got {ops!r} for {len(arrays)} arrays")
    arrays = [a if a is None or isinstance(a, Sparse) else np.ascontiguousarray(a) for a in arrays]
    rep = replica()
    if rep is None or rep.size == 1:
        return arrays
    return rep.comm.reduce(f"{rep.group}/{key}", rep.rank, rep.size, arrays, ops)


class RayRendezvous(Remote, calls=("reduce", "traffic"), sends=("abort", "forget")):
    """A :class:`Rendezvous` in a Ray actor, as the ranks in worker processes reach it (picklable); a
    reduction's ``CollectiveError`` is raised as itself."""

    def __init__(self):
        super().__init__(Rendezvous, max_concurrency=256)
