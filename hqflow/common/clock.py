"""The scheduler's two clocks: the machine's, and a simulated one on which the cost model runs the same loop.

The loop (``hqflow.engine.scheduler``) reads time and waits for its next event only through a clock. On
:class:`SimClock` whatever would happen later (a call ending, a job leaving a device) is an action
registered with ``at(when, action)``; ``wait`` runs the actions in time order, moving ``now`` to each,
until one puts an event in the queue. Actions at the same instant run in the order they were registered,
so a simulated run is the same every time. The loop, job service and pools are the real ones; only what
takes time is stood in for (``hqflow.planning.costmodel``'s simulated executor and backends). What acts at
times of its own (the job service's timeouts) asks the clock for ``alarms(name)``: ``at`` and ``close``.
"""
from __future__ import annotations

import heapq
import itertools
import queue
import threading
import time
from collections.abc import Callable


class RealClock:
    """The machine's clock: seconds from ``time.perf_counter``; waiting blocks on the event queue."""

    def now(self) -> float:
        return time.perf_counter()

    def wait(self, events: queue.Queue):
        return events.get()

    def alarms(self, name: str) -> Alarms:
        return Alarms(name)


class Alarms:
    """Actions at times of the machine's clock, run in time order on one daemon thread (``name``) that the first
    ``at`` starts and ``close`` ends (dropping the actions not yet due)."""

    def __init__(self, name: str):
        self.name, self._due, self._order = name, [], itertools.count()
        self._wake = threading.Condition()
        self._closed, self._thread = False, None

    def at(self, when: float, action: Callable[[], None]) -> None:
        with self._wake:
            if self._closed:
                return
            heapq.heappush(self._due, (when, next(self._order), action))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._wake.notify()

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._due.clear()
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._closed and (not self._due or self._due[0][0] > time.perf_counter()):
                    self._wake.wait(self._due[0][0] - time.perf_counter() if self._due else None)
                if self._closed:
                    return
                action = heapq.heappop(self._due)[2]
            action()


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

    def alarms(self, name: str) -> SimClock:
        return self  # its own actions, run in ``wait``

    def close(self) -> None:
        """Nothing to end: alarms run in ``wait``, on the caller's thread."""

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
