"""A run's statistics: what the loop counts as it goes, and the figures of ``result.extra`` at the end.

``result.extra`` holds, in this order: ``max_admitted`` (the most steps in flight at once), ``executor``,
``completed_steps``, ``steps`` (the stream items taken), the job service's counts (``retries``,
``failed_jobs``, ``timeouts``, ``max_job_queue``; ``quantum_jobs``) and figures (spend, currency, budget,
refused jobs), each pool's members' ``health()`` by pool name (``pools``), and ``bytes_moved`` by the
executor (Ray's object store; empty elsewhere).
"""
from __future__ import annotations

from collections.abc import Mapping


class RunStats:
    """The loop's counts of one run."""

    def __init__(self, executor: str):
        self.executor = executor  # the executor kind's name
        self.max_admitted = 0  # the most steps admitted and unfinished at once
        self.completed = 0  # steps finished (a resumed run's count includes the checkpointed ones)

    def admitted(self, in_flight: int) -> None:
        """A step was admitted; ``in_flight`` steps are now."""
        self.max_admitted = max(self.max_admitted, in_flight)

    def extra(self, steps: int, service, pools: Mapping, moved: dict) -> dict:
        """``result.extra``: these counts, ``steps`` taken from the stream, the job ``service``'s counts and
        figures (``hqflow.jobs.JobService``), the ``pools``' health and the bytes the executor ``moved``."""
        jobs = service.stats
        return dict(max_admitted=self.max_admitted, executor=self.executor, completed_steps=self.completed,
                    steps=steps, **{k: v for k, v in jobs.items() if k != "jobs"}, quantum_jobs=jobs["jobs"],
                    **service.figures(), pools={name: pool.health() for name, pool in pools.items()},
                    bytes_moved=moved)
