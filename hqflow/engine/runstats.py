"""A run's statistics: what the loop counts as it goes, and the figures of ``result.extra`` at the end."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass
class RunStats:
    """The loop's counts of one run."""

    executor: str
    """the executor kind's name"""
    max_admitted: int = 0
    """the most steps admitted and unfinished at once"""
    completed: int = 0
    """steps finished (a resumed run's count includes the checkpointed ones)"""

    def admitted(self, in_flight: int) -> None:
        """A step was admitted; ``in_flight`` steps are now."""
        self.max_admitted = max(self.max_admitted, in_flight)

    def extra(self, steps: int, service, pools: Mapping, moved: dict) -> dict:
        """``result.extra``, in this order: these counts, the ``steps`` taken from the stream, the job ``service``'s
        counts and figures (``hqflow.jobs.service.JobService``: retries, failed and refused jobs, the service jobs, circuits
        and shots its jobs used, spend and shot spend, budgets), each of the ``pools``' members' health, and the
        bytes the executor ``moved`` (Ray's object store)."""
        jobs = service.stats
        return dict(max_admitted=self.max_admitted, executor=self.executor, completed_steps=self.completed,
                    steps=steps, **{k: v for k, v in jobs.items() if k != "jobs"}, quantum_jobs=jobs["jobs"],
                    **service.figures(), pools={name: pool.health() for name, pool in pools.items()},
                    bytes_moved=moved)
