"""Distribution policies: how an algorithm written once as fragments is run.

A policy is a frozen dataclass selected by name. It never touches the
algorithm's code: it only says how stale the parameters an actor uses may be
(the ``max_staleness`` of the learner-to-actor loop edges) and how the
scheduler runs the graph (``SchedulerConfig``).

* ``sync``: the reference. One fragment at a time, actors always use the newest
  parameters. Deterministic for a seed.
* ``pipelined``: actors run ahead of the learner on their own worker slots, with
  parameters at most ``staleness`` versions old; the learner has its own slot.
  With ``staleness=0`` the results equal ``sync``'s, bit for bit.
* ``ray-actors``: the same on Ray: actors are Ray actors (``actors`` of them), and
  one learner.

    from hqflow.distribution import get_distribution
    policy = get_distribution("pipelined", staleness=1)
    hq.run(graph_built_with(policy.staleness), stream, config=policy.scheduler_config(seed=0))
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hqflow.placement import Placement
from hqflow.scheduler import SchedulerConfig

__all__ = ["DISTRIBUTIONS", "Pipelined", "RayActors", "Sync", "get_distribution"]


def _check_int(name: str, value, low: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


@dataclass(frozen=True)
class Sync:
    """One fragment at a time; actors always see the newest parameters."""

    name = "sync"
    staleness = 0

    def scheduler_config(self, seed: int | None = 0) -> SchedulerConfig:
        return SchedulerConfig(executor="sync", seed=seed)


@dataclass(frozen=True)
class Pipelined:
    """Actors run ahead of the learner on threads, with bounded parameter staleness."""

    staleness: int = 1
    """how many parameter versions behind an actor may run (0: identical to ``sync``)"""
    actors: int = 2
    """actor worker slots (rollouts in flight at once)"""
    name = "pipelined"

    def __post_init__(self):
        _check_int("staleness", self.staleness, 0)
        _check_int("actors", self.actors, 1)

    def scheduler_config(self, seed: int | None = 0) -> SchedulerConfig:
        return SchedulerConfig(executor="local", cpu_workers=self.actors, gpu_workers=1, seed=seed)


@dataclass(frozen=True)
class RayActors:
    """Actors are Ray actors; one learner."""

    staleness: int = 1
    """how many parameter versions behind an actor may run"""
    actors: int = 2
    """Ray actor processes that run rollouts"""
    placement: Placement = Placement()
    """where the actors and the learner go on a cluster's nodes (``hqflow.placement``)"""
    name = "ray-actors"

    def __post_init__(self):
        _check_int("staleness", self.staleness, 0)
        _check_int("actors", self.actors, 1)
        if isinstance(self.placement, dict):  # from a run directory's JSON
            object.__setattr__(self, "placement", Placement(**self.placement))
        if not isinstance(self.placement, Placement):
            raise ValueError(f"placement must be a hqflow.placement.Placement, got {self.placement!r}")

    def scheduler_config(self, seed: int | None = 0) -> SchedulerConfig:
        return SchedulerConfig(executor="ray", cpu_workers=self.actors, gpu_workers=1, seed=seed,
                               placement=self.placement)


DISTRIBUTIONS = {"sync": Sync, "pipelined": Pipelined, "ray-actors": RayActors}


def get_distribution(policy="sync", /, **options):
    """A distribution policy by name (``sync``, ``pipelined``, ``ray-actors``), or one given, with overrides."""
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
