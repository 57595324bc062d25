"""The hybrid pipeline as plain data: ``Fragment``s joined by ``Edge``s in a ``Graph``.

A fragment is one of five kinds (``preprocess``, ``prepare``, ``execute``,
``postprocess``, ``learn``), needs one resource (``cpu``, ``gpu``, ``qpu``), has
typed input and output ports, and holds its function by reference
(``"module:qualname"``) plus JSON constants (``params``) passed as keywords.
An ``execute`` fragment holds a ``CircuitTemplate`` and a backend name instead of
a function; its ports follow from the template (see ``execute_ports``). A
classical fragment that submits circuit jobs itself (an RL actor's policy
forward passes) declares the backend names it uses in ``job_backends``.

Edges join ``(fragment, port)`` pairs; a ``None`` fragment means the graph's own
input (as a source) or output (as a destination). A **loop-carried** edge
(``loop=True``) delivers the value produced in step ``t`` to step ``t + 1``, and
``init`` before the first step; every cycle must pass through one.
"""
from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .circuit import CircuitTemplate
from .text import one_line

KINDS = ("preprocess", "prepare", "execute", "postprocess", "learn")
RESOURCES = ("cpu", "gpu", "qpu")
PORT_TYPES = ("any", "array", "tensor", "scalar", "int", "bool", "str", "list", "dict", "object")
GRADIENTS = (None, "param-shift")


class GraphError(ValueError):
    """A graph is malformed: ``problems`` lists every problem found; the message is one line
    (the first problem, or their count and all of them joined by "; ")."""

    def __init__(self, problems: Iterable[str] | str):
        self.problems = [one_line(str(p)) for p in ([problems] if isinstance(problems, str) else problems)]
        n = len(self.problems)
        super().__init__(self.problems[0] if n == 1 else f"{n} problems: " + "; ".join(self.problems))


@dataclass(frozen=True)
class Port:
    name: str
    type: str = "any"

    def __str__(self) -> str:
        return self.name if self.type == "any" else f"{self.name}: {self.type}"


def types_compatible(src: str, dst: str) -> bool:
    return src == dst or "any" in (src, dst) or {src, dst} == {"array", "tensor"}


def execute_ports(template: CircuitTemplate, gradient: str | None) -> tuple[tuple[Port, ...], tuple[Port, ...]]:
    """Input and output ports of an ``execute`` fragment running ``template``.

    Inputs: ``inputs`` ``[B, n_inputs]`` if the circuit has inputs, ``weights``
    ``[n_weights]`` if it has weights. Outputs: ``values`` ``[B, n_obs]`` with
    observables (plus ``stderr`` with shots), else ``probs`` (exact) or
    ``counts`` (shots); with ``gradient="param-shift"`` also ``jacobian``
    ``[B, n_obs, n_weights]``.
    """
    ins = []
    if template.n_inputs:
        ins.append(Port("inputs", "array"))
    if template.n_weights:
        ins.append(Port("weights", "array"))
    if template.observables:
        outs = [Port("values", "array")]
        if template.shots:
            outs.append(Port("stderr", "array"))
    else:
        outs = [Port("probs", "array")] if template.shots is None else [Port("counts", "list")]
    if gradient:
        outs.append(Port("jacobian", "array"))
    return tuple(ins), tuple(outs)


@dataclass(frozen=True)
class Fragment:
    name: str
    kind: str
    inputs: tuple[Port, ...] = ()
    outputs: tuple[Port, ...] = ()
    fn: str | None = None
    resource: str = "cpu"
    params: tuple[tuple[str, Any], ...] = ()
    circuit: CircuitTemplate | None = None
    backend: str | None = None
    gradient: str | None = None
    job_backends: tuple[str, ...] = ()
    """backend (pool) names a classical fragment submits circuit jobs to itself, through
    ``hqflow.get_client()``; the scheduler gives those jobs the same pools, retries and spans
    as an ``execute`` fragment's"""

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.params)

    def port(self, name: str, output: bool) -> Port | None:
        for p in self.outputs if output else self.inputs:
            if p.name == name:
                return p
        return None


@dataclass(frozen=True)
class Edge:
    src: tuple[str | None, str]
    dst: tuple[str | None, str]
    loop: bool = False
    max_staleness: int = 0
    init: Any = None
    start_empty: bool = False  # a loop edge whose first value is None on purpose (init=None given)

    def __str__(self) -> str:
        s = f"{self.src[0]}.{self.src[1]}" if self.src[0] else f"input.{self.src[1]}"
        d = f"{self.dst[0]}.{self.dst[1]}" if self.dst[0] else f"output.{self.dst[1]}"
        if not self.loop:
            return f"{s} -> {d}"
        return f"{s} ~> {d}  (loop-carried, max_staleness={self.max_staleness})"


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
        order = _toposort(self)
        if order is None:
            raise GraphError(_cycle_message(self))
        return order

    def validate(self, backends: Mapping[str, Any] | None = None, resolve: bool = True) -> Graph:
        """Raise ``GraphError`` listing every problem; return ``self`` when valid.

        ``backends`` maps backend names to ``Capabilities`` (or backends) to check
        circuit widths against; by default the registry is asked for each name.
        ``resolve=False`` skips importing fragment functions.
        """
        from .validate import problems

        found = problems(self, backends, resolve)
        if found:
            raise GraphError(found)
        return self

    def to_json(self, indent: int | None = 2) -> str:
        from .serialize import graph_to_json

        return graph_to_json(self, indent)

    @staticmethod
    def from_json(text: str) -> Graph:
        from .serialize import graph_from_json

        return graph_from_json(text)

    def to_networkx(self):
        from .draw import to_networkx

        return to_networkx(self)

    def draw(self, path: str) -> str:
        """Write a PNG picture of the graph to ``path``; return the path."""
        from .draw import draw_png

        return draw_png(self, path)

    def __str__(self) -> str:
        from .draw import to_text

        return to_text(self)


def _toposort(graph: Graph) -> list[Fragment] | None:
    names = [f.name for f in graph.fragments]
    deps = {n: set() for n in names}
    for e in graph.edges:
        if not e.loop and e.src[0] in deps and e.dst[0] in deps:
            deps[e.dst[0]].add(e.src[0])
    order: list[str] = []
    while len(order) < len(names):
        ready = [n for n in names if n not in order and deps[n] <= set(order)]
        if not ready:
            return None
        order.append(ready[0])
    by_name = {f.name: f for f in graph.fragments}
    return [by_name[n] for n in order]


def _cycle_message(graph: Graph) -> str:
    import networkx as nx

    g = nx.DiGraph()
    g.add_edges_from((e.src[0], e.dst[0]) for e in graph.edges if not e.loop and e.src[0] and e.dst[0])
    try:
        cycle = [u for u, _ in nx.find_cycle(g)]
    except nx.NetworkXNoCycle:  # pragma: no cover - only called when a cycle exists
        cycle = []
    path = " -> ".join(cycle + cycle[:1])
    return (
        f"cycle {path} has no loop-carried edge; declare the edge that feeds back "
        "as loop-carried (Pipeline.loop(...) or Edge(loop=True))"
    )


# --- functions held by reference -------------------------------------------------

_RESOLVED: dict[str, Callable] = {}


def fn_ref(fn: Callable, fragment: str = "?") -> str:
    """``"module:qualname"`` for a module-level function (closures and lambdas are refused)."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not module or not qualname or "<locals>" in qualname or "<lambda>" in qualname:
        raise GraphError(
            f"fragment {fragment!r}: function {qualname or fn!r} is a closure or lambda and cannot be "
            "held by reference; define it at module level and pass constants with params="
        )
    ref = f"{module}:{qualname}"
    _RESOLVED[ref] = fn
    return ref


def resolve_fn(ref: str) -> Callable:
    """Import the function named ``"module:qualname"``."""
    if ref in _RESOLVED:
        return _RESOLVED[ref]
    module, sep, qualname = ref.partition(":") if isinstance(ref, str) else ("", "", "")
    if not sep or not module or not qualname or module.startswith("."):
        raise GraphError(f"function reference {ref!r} is not of the form 'module:qualname' (an absolute module)")
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except Exception as exc:  # noqa: BLE001 - importing runs the module's code: any error names the reference
        why = str(exc) if isinstance(exc, (ImportError, AttributeError)) else f"{type(exc).__name__}: {exc}"
        raise GraphError(f"cannot import function {ref!r}: {why}") from None
    if not callable(obj):
        raise GraphError(f"{ref!r} is not callable")
    _RESOLVED[ref] = obj
    return obj


def json_constant(value: Any, what: str) -> Any:
    """Turn numpy/torch values into JSON data; refuse what JSON cannot hold."""
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    if hasattr(value, "tolist"):
        value = value.tolist()
    try:
        # Round-trip, so the graph holds exactly what from_json would give back (tuples become lists).
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        raise GraphError(f"{what} must be JSON data (numbers, strings, lists, dicts), got {type(value).__name__}") from None
