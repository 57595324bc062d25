"""The window of steps in flight: how many steps the loop admits at once, and which loop-carried value each may take.

* **Backpressure** (``Window``): at most ``size`` steps are admitted and unfinished.
* **Bounded staleness** (``LoopValues``). The value a loop edge's source produces at step ``t`` is version
  ``t + 1`` (its initial value is version 0). A consumer at step ``i`` of an edge with ``max_staleness=k``
  takes the newest version in ``[i - k, i]``: ``k = 0`` is exactly one fragment at a time in graph order
  (bit-identical results for the same seed, whatever the executor), and ``k > 0`` lets producers run up to
  ``k`` versions ahead. Versions no admitted step may take any more are forgotten; each edge's newest is
  the run's final state.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hqflow.ir.graph import Graph, GraphError

from .dispatch import Pool
from .fragments import as_port_value
from .ports import PortRef, PortValues, port
from .scheduler_config import WindowConfig


class Window:
    """Steps admitted and not yet finished, at most: see :meth:`auto`."""

    def __init__(self, config: WindowConfig, pools: Mapping[str, Pool]):
        self.config, self.pools = config, pools
        self.size = self.auto()

    def auto(self) -> int:
        """The config's size, or twice the jobs the pools keep in flight, plus 2 (at least 8); 1 where the
        executor runs one thing at a time."""
        in_flight = sum(m.capacity for pool in self.pools.values() for m in pool.members if not m.removed)
        return 1 if self.config.one_at_a_time else self.config.size or max(8, 2 * in_flight + 2)

    def grow(self) -> None:
        """The pools changed: as many steps as they keep busy now, never fewer than before."""
        self.size = max(self.size, self.auto())


class LoopValues:
    """The versions of every loop edge's value; an edge is known by its index in ``graph.edges``."""

    def __init__(self, graph: Graph, initial_state: Mapping[PortRef | str, Any] | None = None):
        """Version 0 of each loop edge: ``initial_state``'s value for its source port (``PortRef`` or
        ``"frag.port"``), else the edge's ``init``."""
        self.graph = graph
        self.edges = {i: e for i, e in enumerate(graph.edges) if e.loop}
        self.versions: dict[int, dict[int, Any]] = {}  # loop edge index -> version -> value
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
            self.versions[i] = {0: self._typed(i, value)}
        unknown = sorted(str(named[k]) for k in set(named) - {PortRef(*e.src) for e in self.edges.values()})
        if unknown:
            raise GraphError(f"initial_state names {unknown}, which are not loop-carried sources")

    def _typed(self, i: int, value: Any) -> Any:
        """``value`` as edge ``i``'s consumer port takes it."""
        e = self.edges[i]
        return as_port_value(value, self.graph.fragment(e.dst[0]).port(e.dst[1], output=False).type)

    def restore(self, steps: int, state: Mapping[PortRef, Any]) -> None:
        """Continue after ``steps`` finished steps, from their values by source port (a checkpoint's)."""
        for i, e in self.edges.items():
            self.versions[i] = {steps: self._typed(i, state[PortRef(*e.src)])}

    def take(self, i: int, step: int, staleness: int) -> tuple[int, Any] | None:
        """The newest version of edge ``i`` a consumer at ``step`` may take, and its value; None if none is there yet."""
        versions = self.versions[i]
        usable = [v for v in versions if step - staleness <= v <= step]
        if not usable:
            return None
        newest = max(usable)
        return newest, versions[newest]

    def produced(self, fragment: str, step: int, outputs: Mapping[str, Any]) -> None:
        """``fragment`` finished ``step``: its outputs are version ``step + 1`` of the edges it is the source of."""
        for i, e in self.edges.items():
            if e.src[0] == fragment:
                self.versions[i][step + 1] = outputs[e.src[1]]

    def forget(self, oldest: int) -> None:
        """Drop the versions that no step from ``oldest`` on may take (each edge keeps its newest)."""
        for i, versions in self.versions.items():
            keep = oldest - self.edges[i].max_staleness
            newest = max(versions)
            for v in [v for v in versions if v < keep and v != newest]:
                del versions[v]

    def at(self, version: int) -> dict[PortRef, Any] | None:
        """Every edge's value at ``version``, by source port; None where one is gone (never, under
        :meth:`forget`'s rule, for the version after the finished steps)."""
        if any(version not in versions for versions in self.versions.values()):
            return None
        return {PortRef(*self.edges[i].src): versions[version] for i, versions in self.versions.items()}

    def newest(self) -> PortValues:
        """Every edge's newest value, by source port: the run's final state (``result.state``)."""
        return PortValues({PortRef(*self.edges[i].src): versions[max(versions)] for i, versions in self.versions.items()})
