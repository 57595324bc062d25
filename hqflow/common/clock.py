"""The scheduler's two clocks: the machine's, and a simulated one on which the cost model runs the same loop.

The loop (``hqflow.engine.scheduler``) reads time and waits for its next event only through a clock. On
:class:`SimClock` whatever would happen later (a call ending, a job leaving a device) is an action
registered with ``at(when, action)``; ``wait`` runs the actions in time order, moving ``now`` to each,
until one puts an event in the queue. Actions at the same instant run in the order they were registered,
so a simulated run is the same every time. The loop, job service and pools are the real ones; only what
takes time is stood in for (``hqflow.planning.costmodel``'s simulated executor and backends).
"""
from __future__ import annotations

import heapq
import itertools
import queue
import time
from collections.abc import Callable


class RealClock:
    """The machine's clock: seconds from ``time.perf_counter``; waiting blocks on the event queue."""

    def now(self) -> float:
        return time.perf_counter()

    def wait(self, events: queue.Queue):
        return events.get()


REAL = RealClock()


class SimClock:
    """A simulated clock (see the module docstring), starting at 0."""

    def __init__(self) -> None:
        self._now = 0.0
        self._actions: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()

    def now(self) -> float:
        return self._now

    def at(self, when: float, action: Callable[[], None]) -> None:
        """Run ``action()`` when the clock reaches ``when`` (at once, in turn, if that is not later than now)."""
        heapq.heappush(self._actions, (max(when, self._now), next(self._order), action))

    def wait(self, events: queue.Queue):
        """The next event: the actions due first run until one of them puts an event in ``events``."""
        while events.empty():
            if not self._actions:
                raise RuntimeError("the simulated run has nothing left to wait for, yet work is unfinished "
                                   "(a bug: please report)")
            when, _, action = heapq.heappop(self._actions)
            self._now = when
            action()
        return events.get_nowait()
