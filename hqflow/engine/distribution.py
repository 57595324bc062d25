"""Distribution policies: how an algorithm written once as fragments is run.

A policy is a frozen dataclass selected by name. It never touches the algorithm's code: it says how
stale the parameters an actor uses may be (``staleness``, the ``max_staleness`` of the learner-to-actor
loop edges) and how the scheduler runs the graph (``scheduler_config``). ``sync`` is the reference,
deterministic for a seed; ``pipelined`` at ``staleness=0`` equals it bit for bit, and ``multi-learner``
(every learner applies the same reduced update, ``hqflow.engine.collective``) up to floating-point summation order.

    from hqflow.engine.distribution import get_distribution
    policy = get_distribution("pipelined", staleness=1)
    hq.run(graph_built_with(policy.staleness), stream, config=policy.scheduler_config(seed=0))
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hqflow.engine.collective import Compression
from hqflow.common.config import as_type, check_ints
from hqflow.engine.scheduler_config import ExecutorKind
from hqflow.engine.placement import Placement
from hqflow.engine.scheduler_config import SchedulerConfig

__all__ = ["DISTRIBUTIONS", "MultiLearner", "Pipelined", "RayActors", "Sync", "get_distribution"]


@dataclass(frozen=True)
class Sync:
    """One fragment at a time; actors always see the newest parameters."""

    name = "sync"
    staleness = 0

    def scheduler_config(self, seed: int | None = 0) -> SchedulerConfig:
        return SchedulerConfig(executor=ExecutorKind.SYNC, seed=seed)


@dataclass(frozen=True)
class Pipelined:
    """Actors run ahead of the learner on threads, with bounded parameter staleness."""

    staleness: int = 1
    """how many parameter versions behind an actor may run (0: identical to ``sync``)"""
    actors: int = 2
    """actor worker slots (rollouts in flight at once)"""
    name = "pipelined"

    def __post_init__(self):
        check_ints(self, staleness=0, actors=1)

    def scheduler_config(self, seed: int | None = 0) -> SchedulerConfig:
        return SchedulerConfig(executor=ExecutorKind.LOCAL, cpu_workers=self.actors, gpu_workers=1, seed=seed)


@dataclass(frozen=True)
class RayActors(Pipelined):
    """``pipelined`` with its actors as Ray actor processes; one learner."""

    placement: Placement = Placement()
    """where the actors and the learner go on a cluster's nodes (``hqflow.engine.placement``)"""
    name = "ray-actors"

    def __post_init__(self):
        super().__post_init__()
        as_type(self, "placement", Placement)

    def scheduler_config(self, seed: int | None = 0) -> SchedulerConfig:
        return dataclasses.replace(super().scheduler_config(seed), executor=ExecutorKind.RAY, placement=self.placement)


@dataclass(frozen=True)
class MultiLearner:
    """Several learners share each update; actors as in ``ray-actors``."""

    learners: int = 2
    """learner replicas; each differentiates its share of the batch's rows"""
    staleness: int = 1
    """how many parameter versions behind an actor may run (0: the result of ``sync``)"""
    actors: int = 1
    """actor slots that run rollouts"""
    executor: ExecutorKind = ExecutorKind.RAY
    """``ray`` (learners and actors are Ray actors, on a cluster's nodes) or ``local`` (threads): an
    ``ExecutorKind``, or its name"""
    placement: Placement = Placement()
    """where the actors and the learners go on a cluster's nodes (``hqflow.engine.placement``)"""
    compression: Compression = Compression()
    """how learners compress the gradient shares they reduce: none (exact), top-k or float16, with
    error feedback (``hqflow.engine.collective.Compression``)"""
    name = "multi-learner"

    def __post_init__(self):
        check_ints(self, learners=1, staleness=0, actors=1)
        if self.executor not in (ExecutorKind.RAY, ExecutorKind.LOCAL):  # also a name, from a run directory's JSON
            raise ValueError(f"executor must be 'ray' or 'local', got {self.executor!r}")
        object.__setattr__(self, "executor", ExecutorKind(self.executor))
        as_type(self, "placement", Placement)
        if isinstance(self.compression, str):
            object.__setattr__(self, "compression", Compression.parse(self.compression))
        as_type(self, "compression", Compression)

    def scheduler_config(self, seed: int | None = 0) -> SchedulerConfig:
        return SchedulerConfig(executor=self.executor, cpu_workers=self.actors, gpu_workers=self.learners,
                               learners=self.learners, seed=seed, placement=self.placement,
                               compression=self.compression)


DISTRIBUTIONS = {"sync": Sync, "pipelined": Pipelined, "ray-actors": RayActors, "multi-learner": MultiLearner}


def get_distribution(policy="sync", /, **options):
    """A distribution policy by name (``sync``, ``pipelined``, ``ray-actors``, ``multi-learner``), or one
    given, with overrides."""
    if not isinstance(policy, str):
        if type(policy) not in DISTRIBUTIONS.values():
            raise ValueError(f"not a distribution policy: {policy!r}; known: {', '.join(DISTRIBUTIONS)}")
        return dataclasses.replace(policy, **options) if options else policy
    cls = DISTRIBUTIONS.get(policy)
    if cls is None:
        raise ValueError(f"unknown distribution policy {policy!r}; known: {', '.join(DISTRIBUTIONS)}")
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(options) - fields)
    if unknown:
        raise ValueError(f"distribution policy {policy!r} takes {sorted(fields) or 'no options'}, got {unknown}")
    return cls(**options)
