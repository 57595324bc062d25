"""The hybrid pipeline as plain data: fragments joined by ``Edge``s in a ``Graph``.

A fragment (``hqflow.ir.nodes``) is classical work (``Classical``: kind
``preprocess``, ``prepare``, ``postprocess`` or ``learn``, a function held by
reference, ``"module:qualname"``, plus JSON constants, ``params``, passed as
keywords) or a circuit call (``CircuitCall``: kind ``execute``, a
``CircuitTemplate`` and a backend name; its ports follow from the template, see
``execute_ports``). Every fragment needs one resource (``cpu``, ``gpu``, ``qpu``)
and has typed input and output ports. A classical fragment that submits circuit
jobs itself (an RL actor's policy forward passes) declares the backend names it
uses in ``job_backends``.

Edges join ``(fragment, port)`` pairs; a ``None`` fragment means the graph's own
input (as a source) or output (as a destination). A **loop-carried** edge
(``loop=True``) delivers the value produced in step ``t`` to step ``t + 1``, and
``init`` before the first step; every cycle must pass through one.

``Graph``'s methods are the IR's face: ``validate()`` (``hqflow.ir.validate``),
``to_json()``/``from_json()`` (``hqflow.ir.serialize``), ``to_networkx()``,
``draw()`` and ``str()`` (``hqflow.ir.draw``). Those modules read a graph without
importing this one, so the IR's modules import one another without a cycle. The
node types are re-exported here (``from hqflow.ir.graph import Fragment, ...``).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .draw import draw_png, to_networkx, to_text
from .nodes import (
    CLASSICAL_KINDS,
    GRADIENTS,
    KINDS,
    PORT_TYPES,
    RESOURCES,
    CircuitCall,
    Classical,
    Edge,
    Fragment,
    GraphError,
    Port,
    execute_ports,
    fn_ref,
    json_constant,
    resolve_fn,
    types_compatible,
)
from .serialize import graph_parts, graph_to_json
from .validate import cycle_message, problems, toposort

__all__ = [
    "CLASSICAL_KINDS",
    "GRADIENTS",
    "KINDS",
    "PORT_TYPES",
    "RESOURCES",
    "CircuitCall",
    "Classical",
    "Edge",
    "Fragment",
    "Graph",
    "GraphError",
    "Port",
    "execute_ports",
    "fn_ref",
    "json_constant",
    "resolve_fn",
    "types_compatible",
]


@dataclass(frozen=True)
class Graph:
    name: str
    fragments: tuple[Fragment, ...]
    edges: tuple[Edge, ...]
    inputs: tuple[Port, ...] = ()
    outputs: tuple[Port, ...] = ()
    _index: dict = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    def fragment(self, name: str) -> Fragment:
        if not self._index:
            self._index.update({f.name: f for f in self.fragments})
        try:
            return self._index[name]
        except KeyError:
            raise GraphError(f"graph {self.name!r} has no fragment {name!r}") from None

    @property
    def loop_edges(self) -> tuple[Edge, ...]:
        return tuple(e for e in self.edges if e.loop)

    def topological_order(self) -> list[Fragment]:
        """Fragments ordered by the non-loop edges (ties keep declaration order)."""
        order = toposort(self)
        if order is None:
            raise GraphError(cycle_message(self))
        return order

    def validate(self, backends: Mapping[str, Any] | None = None, resolve: bool = True) -> Graph:
        """Raise ``GraphError`` listing every problem; return ``self`` when valid.

        ``backends`` maps backend names to ``Capabilities`` (None: unchecked) to check
        circuit widths against; without it those checks are skipped
        (``Pipeline.build`` passes the registry's). ``resolve=False`` skips
        importing fragment functions.
        """
        found = problems(self, backends, resolve)
        if found:
            raise GraphError(found)
        return self

    def to_json(self, indent: int | None = 2) -> str:
        return graph_to_json(self, indent)

    @staticmethod
    def from_json(text: str) -> Graph:
        return Graph(**graph_parts(text))

    def to_networkx(self):
        return to_networkx(self)

    def draw(self, path: str) -> str:
        """Write a PNG picture of the graph to ``path``; return the path."""
        return draw_png(self, path)

    def __str__(self) -> str:
        return to_text(self)
