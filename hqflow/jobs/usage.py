"""What a piece of work used on its services, measured where its jobs are submitted.

    with usage.meter() as m:        # around a fragment's work (its threads inherit the meter: contextvars)
        ...                         # jobs submitted here are recorded when they end
    m.total                         # a ``Usage``: service jobs, circuits, shots, list-price cost

Jobs through the scheduler are recorded once, by the ``JobClient`` that submitted them; a ``QuantumLayer`` on
a backend object records its own. A thread started without the caller's context records nothing.
"""
from __future__ import annotations

import contextlib
import contextvars
import threading

from hqflow.backends import Usage

_CURRENT: contextvars.ContextVar[Meter | None] = contextvars.ContextVar("hqflow_usage_meter", default=None)


class Meter:
    """A thread-safe running total of ``Usage``."""

    def __init__(self):
        self._lock = threading.Lock()
        self.total = Usage()

    def add(self, used: Usage) -> None:
        with self._lock:
            self.total = self.total + used


@contextlib.contextmanager
def meter():
    """Bind a fresh ``Meter`` for the block (nested meters: the innermost records)."""
    m = Meter()
    token = _CURRENT.set(m)
    try:
        yield m
    finally:
        _CURRENT.reset(token)


def current() -> Meter | None:
    """The meter bound here, if any (capture it at submit: a job ends on another thread)."""
    return _CURRENT.get()


def record(used: Usage | None, into: Meter | None = None) -> None:
    """Add ``used`` to ``into`` (default: the current meter); nothing without one."""
    m = into if into is not None else _CURRENT.get()
    if m is not None and used is not None:
        m.add(used)
