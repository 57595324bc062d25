"""The job service's timeouts (``JobService``'s ``job_timeout``), on the run's clock: the machine's, where a
thread of alarms looks at each attempt in time, or the cost model's simulated one, where the same looks are
actions of the simulated run (``hqflow.common.clock``)."""
from __future__ import annotations

from ..common.outcome import TIMEOUT


class Watchdog:
    """A service's timeouts, on its run's clock (``clock.alarms``): an attempt still in its service's queue is
    asked again a tick later (``job_timeout / 20``, within 0.05 s and 1 s); one out of it is cancelled and retried
    ``job_timeout`` after it was first seen out."""

    def __init__(self, service):
        self.service, self.alarms = service, service.clock.alarms("hqflow-job-timeouts")  # (no thread until used)

    def arm(self, when: float, token: int) -> None:
        """Look at the attempt ``token`` again at ``when`` (the caller holds the service's lock)."""
        self.alarms.at(when, lambda: self._look(token))

    def close(self) -> None:
        self.alarms.close()

    def _look(self, token: int) -> None:
        s = self.service
        timeout, now = s.settings.job_timeout, s.clock.now()
        with s._lock:
            att = s._live.get(token)
        if att is None or att.job is None:
            return
        if att.running is None:
            try:
                started = bool(att.job.started())
            except Exception:  # noqa: BLE001 - a job that cannot say is timed from now
                started = True
            tick = min(max(timeout / 20, 0.05), 1.0)
            with s._lock:
                if token in s._live and started:  # first seen out of the queue: from submission when at once
                    att.running = att.start if now - att.start < tick else now
                    self.arm(att.running + timeout, token)
                elif token in s._live:
                    self.arm(now + tick, token)
            return
        with s._lock:
            if token not in s._live:
                return
            s.books.counts["timeouts"] += 1
        s._failed(token, TIMEOUT)  # first: its cancellation's callback then finds nothing
        att.job.cancel()  # and ends what it has on its service
