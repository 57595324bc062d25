"""What the scheduler's loop hears: one small frozen type per kind of event.

Worker threads, Ray replies and backends' jobs put these in the run's event queue; the loop
(``hqflow.engine.scheduler``) takes them out through its clock and dispatches on their type.
"""
from __future__ import annotations

import concurrent.futures as cf
from dataclasses import dataclass
from typing import Any

from hqflow.ir.graph import Fragment

from ..common.lanes import Lane


@dataclass(frozen=True, eq=False)
class TaskDone:
    """A classical call of ``fragment`` at ``step`` ended in worker slot ``lane``; ``future`` holds
    ``(outputs, spans, node)`` or its error (``Executor.submit``)."""

    fragment: Fragment
    step: int
    version: int | None
    """the oldest parameter version among its loop-carried inputs (None: it has none)"""
    lane: Lane
    """the worker slot it held (``cpu/0``, ``gpu/1``)"""
    start: float
    end: float
    """on the run's clock"""
    future: cf.Future
    rank: int = 0
    """the replica's rank (learner replicas, ``SchedulerConfig.learners``)"""


@dataclass(frozen=True, eq=False)
class CallDone:
    """The job of a circuit call of ``fragment`` at ``step`` ended; ``future`` holds its ``BatchResult``
    or its error, ``post`` the postprocessing its outputs are taken with (``Executor.circuit_outputs``)."""

    fragment: Fragment
    step: int
    post: Any
    future: cf.Future


@dataclass(frozen=True)
class Wake:
    """The run's worker slots changed (``RunHandle.set_workers``): the loop dispatches again."""


Event = TaskDone | CallDone | Wake

__all__ = ["CallDone", "Event", "TaskDone", "Wake"]
