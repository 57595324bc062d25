"""Distribution policies: how an algorithm written once as fragments is run.

A policy is one frozen type, :class:`Distribution`, made by one of four presets (``DISTRIBUTIONS``) from its
options. It never touches the algorithm's code: it says how stale the parameters an actor uses may be
(``staleness``, the ``max_staleness`` of the learner-to-actor loop edges) and how the scheduler runs the graph
(``config``: a ``SchedulerConfig``, whose fields are declared there only). ``sync`` is the reference,
deterministic for a seed; ``pipelined`` at ``staleness=0`` equals it bit for bit, and ``multi-learner``
(every learner applies the same reduced update, ``hqflow.engine.collective``) up to floating-point summation order.

    from hqflow.distribution import get_distribution
    policy = get_distribution("pipelined", staleness=1)
    hq.run(graph_built_with(policy.staleness), stream, config=policy.scheduler_config(seed=0))
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from hqflow.common.config import check_ints
from hqflow.engine.collective import Compression
from hqflow.engine.placement import Placement
from hqflow.engine.scheduler_config import ExecutorKind, SchedulerConfig

__all__ = ["DISTRIBUTIONS", "Distribution", "MultiLearner", "Pipelined", "RayActors", "Sync", "get_distribution"]


@dataclass(frozen=True, repr=False)
class Distribution:
    """A distribution policy. It prints as its preset with its options, ``Pipelined(staleness=1, actors=2)``;
    a run directory saves it as its ``name`` and ``options()``, and ``get_distribution`` makes it again."""

    name: str
    """its preset: ``sync``, ``pipelined``, ``ray-actors`` or ``multi-learner``"""
    staleness: int
    """how many parameter versions behind an actor may run (0: the result of ``sync``)"""
    config: SchedulerConfig
    """how the scheduler runs the graph (the run's seed aside): its executor, worker slots and learners"""

    # the options, read from the config (``actors``: its ``cpu_workers``)
    actors = property(lambda self: self.config.cpu_workers, doc="actor worker slots (rollouts in flight at once)")
    learners = property(lambda self: self.config.learners, doc="learner replicas, each on a learner slot")
    executor = property(lambda self: self.config.executor, doc="``ray`` (Ray actors), ``local`` (threads) or ``sync``")
    placement = property(lambda self: self.config.placement, doc="where actors and learners go on a cluster's nodes")
    compression = property(lambda self: self.config.compression, doc="how learners compress the shares they reduce")

    def scheduler_config(self, seed: int | None = 0) -> SchedulerConfig:
        return dataclasses.replace(self.config, seed=seed)

    def options(self) -> dict[str, Any]:
        """Its preset's options, as a run directory's ``config.json`` keeps them (``distribution_options``)."""
        return {k: dataclasses.asdict(v) if dataclasses.is_dataclass(v := getattr(self, k)) else v
                for k in DISTRIBUTIONS[self.name].options}

    def __repr__(self) -> str:
        preset = DISTRIBUTIONS[self.name]
        return f"{preset.title}({', '.join(f'{k}={getattr(self, k)!r}' for k in preset.options)})"


@dataclass(frozen=True)
class Preset:
    """A kind of distribution policy, called with its options to make one (``Pipelined(staleness=0)``)."""

    name: str
    title: str
    """how its policies print"""
    executors: tuple[ExecutorKind, ...]
    """the executors it runs on: the first, unless ``executor`` is an option"""
    defaults: tuple[tuple[str, Any], ...] = ()
    """its options and their defaults, in the order its policies print and save them"""

    @property
    def options(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.defaults)

    def __call__(self, **options) -> Distribution:
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            raise ValueError(f"distribution policy {self.name!r} takes {sorted(self.options) or 'no options'}, "
                             f"got {unknown}")
        o = {**dict(self.defaults), **options}
        check_ints(SimpleNamespace(**o), **{k: 0 if k == "staleness" else 1 for k in self.options
                                            if k in ("learners", "staleness", "actors")})
        executor = o.get("executor", self.executors[0])
        if executor not in self.executors:  # also a name, from a run directory's JSON
            raise ValueError(f"executor must be {' or '.join(repr(str(k)) for k in self.executors)}, got {executor!r}")
        compression = o.get("compression", Compression())
        learners = o.get("learners", 1)
        return Distribution(self.name, o.get("staleness", 0), SchedulerConfig(
            executor=executor, cpu_workers=o.get("actors", 1), gpu_workers=learners, learners=learners,
            placement=o.get("placement", Placement()),
            compression=Compression.parse(compression) if isinstance(compression, str) else compression))


_RAY, _LOCAL = ExecutorKind.RAY, ExecutorKind.LOCAL
Sync = Preset("sync", "Sync", (ExecutorKind.SYNC,))  # one fragment at a time; actors see the newest parameters
# actors run ahead of the learner on threads, with bounded parameter staleness
Pipelined = Preset("pipelined", "Pipelined", (_LOCAL,), (("staleness", 1), ("actors", 2)))
# pipelined with its actors as Ray actor processes; one learner
RayActors = Preset("ray-actors", "RayActors", (_RAY,), (("staleness", 1), ("actors", 2), ("placement", Placement())))
# several learners share each update, each differentiating its share of the batch's rows; actors as in ray-actors
# (executor ray) or on threads (local)
MultiLearner = Preset("multi-learner", "MultiLearner", (_RAY, _LOCAL), (
    ("learners", 2), ("staleness", 1), ("actors", 1), ("executor", _RAY), ("placement", Placement()),
    ("compression", Compression())))
DISTRIBUTIONS = {p.name: p for p in (Sync, Pipelined, RayActors, MultiLearner)}


def get_distribution(policy="sync", /, **options) -> Distribution:
    """A distribution policy by name (``sync``, ``pipelined``, ``ray-actors``, ``multi-learner``), or one
    given, with overrides."""
    if isinstance(policy, Distribution):
        return DISTRIBUTIONS[policy.name](**{**policy.options(), **options}) if options else policy
    preset = DISTRIBUTIONS.get(policy) if isinstance(policy, str) else None
    if preset is None:
        what = "unknown distribution policy" if isinstance(policy, str) else "not a distribution policy:"
        raise ValueError(f"{what} {policy!r}; known: {', '.join(DISTRIBUTIONS)}")
    return preset(**options)
