"""The window of steps in flight: how many steps the loop admits at once, and the values they read.

* **Backpressure** (``Window``): at most ``size`` steps are admitted and unfinished.
* **Values** (``Values``): each step's port values, from its stream item and its fragments' outputs, and every
  loop edge's versions. The value a loop edge's source produces at step ``t`` is version ``t + 1`` (its initial
  value is version 0; a resumed run's, the number of its first step). A consumer at step ``i`` of an edge
  with ``max_staleness=k`` takes version ``i - k`` (or the first one, early on): ``k = 0`` is exactly one
  fragment at a time in graph order (bit-identical results for the same seed, whatever the executor), and
  ``k > 0`` lets producers run ``k`` versions ahead. The version taken never depends on timing, so a run is a
  function of its seed, and a resumed one (its checkpoint holds the ``k`` versions before it, ``Versions``)
  goes on as if never stopped. Versions no admitted step may take any more are forgotten; each edge's newest
  is the run's final state.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hqflow.ir.graph import Fragment, Graph, GraphError

from ..jobs.dispatch import Pool
from .fragments import as_port_value
from .ports import PortRef, PortValues, port
from .scheduler_config import SchedulerConfig


class Window:
    """Steps admitted and not yet finished, at most: see :meth:`auto`."""

    def __init__(self, config: SchedulerConfig, pools: Mapping[str, Pool]):
        self.config, self.pools = config, pools
        self.size = self.auto()

    def auto(self) -> int:
        """The config's ``window``, or twice the jobs the pools keep in flight, plus 2 (at least 8); 1 where
        the executor runs one thing at a time."""
        in_flight = sum(m.capacity for pool in self.pools.values() for m in pool.members if not m.removed)
        return 1 if self.config.executor.one_at_a_time else self.config.window or max(8, 2 * in_flight + 2)

    def grow(self) -> None:
        """The pools changed: as many steps as they keep busy now, never fewer than before."""
        self.size = max(self.size, self.auto())


@dataclass(frozen=True)
class Versions:
    """A loop source's value at several versions (``{version: value}``): what a run that continues another
    starts from, the newest and the ones its first steps take at ``max_staleness > 0``."""

    values: Mapping[int, Any]

    def __post_init__(self):
        if not self.values or not all(isinstance(v, int) and not isinstance(v, bool) for v in self.values):
            raise ValueError(f"Versions maps integer versions to values, got versions {list(self.values)!r}")


class Values:
    """The values on a run's edges; a loop edge is known by its index in ``graph.edges``."""

    def __init__(self, graph: Graph, initial_state: Mapping[PortRef | str, Any] | None = None):
        """Version 0 of each loop edge: ``initial_state``'s value for its source port (``PortRef`` or
        ``"frag.port"``), else the edge's ``init`` (a checkpoint's values: :meth:`restore`)."""
        self.graph = graph
        incoming = {e.dst: i for i, e in enumerate(graph.edges)}
        # each fragment's inputs: (port, the index of the edge into it), worked out once
        self.wiring = {f.name: [(p.name, incoming[(f.name, p.name)]) for p in f.inputs] for f in graph.fragments}
        self.outputs = {p.name: graph.edges[incoming[(None, p.name)]].src for p in graph.outputs}
        self.steps: dict[tuple, Any] = {}  # (fragment or None, port, step) -> value
        self.edges = {i: e for i, e in enumerate(graph.edges) if e.loop}
        self.versions: dict[int, dict[int, Any]] = {}  # loop edge index -> version -> value
        self.first: dict[int, int] = {}  # loop edge index -> its oldest version at the start
        overrides, named = {}, {}  # by port; each port's key as the caller wrote it
        for key, value in (initial_state or {}).items():
            try:
                overrides[port(key)], named[port(key)] = value, key
            except ValueError:  # not "frag.port": names no loop-carried source
                named[key] = key
        for i, e in self.edges.items():
            key = PortRef(*e.src)
            value = overrides.get(key, e.init)
            if value is None and not (e.start_empty and key not in overrides):
                raise GraphError(f"loop-carried edge {e} has no initial value; give init= or "
                                 f"initial_state={{{str(key)!r}: ...}}")
            self._set(i, 0, value)
        unknown = sorted(str(named[k]) for k in set(named) - {PortRef(*e.src) for e in self.edges.values()})
        if unknown:
            raise GraphError(f"initial_state names {unknown}, which are not loop-carried sources")

    def _typed(self, i: int, value: Any) -> Any:
        """``value`` as edge ``i``'s consumer port takes it."""
        e = self.edges[i]
        return as_port_value(value, self.graph.fragment(e.dst[0]).port(e.dst[1], output=False).type)

    def _set(self, i: int, start: int, value: Any) -> None:
        """Edge ``i`` starts at version ``start`` with ``value`` (a ``Versions``: with those versions up to it)."""
        given = value.values if isinstance(value, Versions) else {start: value}
        self.versions[i] = {v: self._typed(i, x) for v, x in given.items() if v <= start}
        if start not in self.versions[i]:
            raise GraphError(f"the initial state of {PortRef(*self.edges[i].src)} has no version {start}")
        self.first[i] = min(self.versions[i])

    def restore(self, steps: int, state: Mapping[PortRef, Any]) -> None:
        """Continue after ``steps`` finished steps, from their values by source port (a checkpoint's)."""
        for i, e in self.edges.items():
            self._set(i, steps, state[PortRef(*e.src)])

    def admit(self, step: int, item: Mapping[str, Any]) -> None:
        """Step ``step`` begins: its stream item's values are the graph inputs'."""
        for k, v in item.items():
            self.steps[(None, k, step)] = v

    def inputs(self, f: Fragment, step: int) -> tuple[dict, int | None] | None:
        """The arguments of ``(f, step)`` and the oldest loop-carried version among them, or None if not ready."""
        args, taken = {}, []
        for name, i in self.wiring[f.name]:
            e = self.graph.edges[i]
            if e.loop:
                taken.append(max(step - e.max_staleness, self.first[i]))
                if taken[-1] not in self.versions[i]:
                    return None
                args[name] = self.versions[i][taken[-1]]
            else:
                if (*e.src, step) not in self.steps:
                    return None
                args[name] = self.steps[(*e.src, step)]
        return args, (min(taken) if taken else None)

    def produced(self, fragment: str, step: int, outputs: Mapping[str, Any]) -> None:
        """``fragment`` finished ``step``: its outputs are the step's values of its ports, and version
        ``step + 1`` of the loop edges it is the source of."""
        for name, value in outputs.items():
            self.steps[(fragment, name, step)] = value
        for i, e in self.edges.items():
            if e.src[0] == fragment:
                self.versions[i][step + 1] = outputs[e.src[1]]

    def finish(self, step: int) -> dict[str, Any]:
        """Step ``step`` is done: the graph's outputs, and its values are dropped."""
        outputs = {name: self.steps[(*src, step)] for name, src in self.outputs.items()}
        self.steps = {k: v for k, v in self.steps.items() if k[2] != step}
        return outputs

    def forget(self, oldest: int) -> None:
        """Drop the versions that no step from ``oldest`` on may take (each edge keeps its newest)."""
        for i, versions in self.versions.items():
            keep = oldest - self.edges[i].max_staleness
            newest = max(versions)
            for v in [v for v in versions if v < keep and v != newest]:
                del versions[v]

    def at(self, version: int) -> dict[PortRef, Versions] | None:
        """Every loop source's values from ``version`` back as far as a step from ``version`` on may take
        (``max_staleness``), by source port: a checkpoint after ``version`` finished steps; None where ``version``
        is gone (never, under :meth:`forget`'s rule, for the version after the finished steps)."""
        if any(version not in versions for versions in self.versions.values()):
            return None
        out: dict[PortRef, dict] = {}
        for i, versions in self.versions.items():
            back = self.edges[i].max_staleness
            out.setdefault(PortRef(*self.edges[i].src), {}).update(
                {v: x for v, x in versions.items() if version - back <= v <= version})
        return {ref: Versions(dict(sorted(vs.items()))) for ref, vs in out.items()}

    def newest(self) -> PortValues:
        """Every edge's newest value, by source port: the run's final state (``result.state``)."""
        return PortValues({PortRef(*self.edges[i].src): versions[max(versions)] for i, versions in self.versions.items()})
