"""``problems(graph)``: every reason a graph cannot run, as readable messages.

The IR knows no backend. Checks against a backend (its name exists, the circuit
fits its qubits) use the ``backends`` given: a mapping from each name to its
``Capabilities`` (or a backend), or to None for a name that is checked later (a
pool name bound when the graph runs). Without ``backends`` they are skipped;
``hqflow.Pipeline.build`` and ``hqflow inspect`` pass the registry's.

A graph is read, not imported: ``graph`` is anything with ``Graph``'s fields
(``GraphLike``; ``hqflow.ir.graph`` imports this module). ``toposort`` and ``cycle_message``
serve ``Graph.topological_order`` too.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from .nodes import (
    GRADIENTS,
    KINDS,
    PORT_TYPES,
    RESOURCES,
    CircuitCall,
    Classical,
    GraphError,
    GraphLike,
    execute_ports,
    resolve_fn,
    types_compatible,
)
from .text import lone_surrogate


def problems(graph: GraphLike, backends: Mapping[str, Any] | None = None, resolve: bool = True) -> list[str]:
    out: list[str] = [f"{what} {name!r} is not Unicode text (it holds a lone surrogate)"
                      for what, name in _names(graph) if lone_surrogate(name) is not None]
    names = [f.name for f in graph.fragments]
    for name, n in Counter(names).items():
        if n > 1:
            out.append(f"fragment name {name!r} is used {n} times")
    for f in graph.fragments:
        out += _fragment_problems(f, backends, resolve)
    for p in graph.inputs + graph.outputs:
        if p.type not in PORT_TYPES:
            out.append(f"graph port {p.name!r} has unknown type {p.type!r}; known: {', '.join(PORT_TYPES)}")
    out += _edge_problems(graph)
    if toposort(graph) is None:
        out.append(cycle_message(graph))
    return out


def _names(graph: GraphLike):
    """``(what, name)`` of every name in the graph: its own, its fragments' and their ports'."""
    yield "graph name", graph.name
    for p in graph.inputs + graph.outputs:
        yield "graph port", p.name
    for f in graph.fragments:
        yield "fragment name", f.name
        for p in f.inputs + f.outputs:
            yield f"fragment {f.name!r}: port", p.name


def _fragment_problems(f, backends, resolve) -> list[str]:
    out: list[str] = []
    where = f"fragment {f.name!r}"
    if not f.name or "." in f.name:
        out.append(f"{where}: names must be non-empty and contain no '.'")
    if f.kind not in KINDS:
        return out + [f"{where}: unknown kind {f.kind!r}; kinds are {', '.join(KINDS)}"]
    out += _resource_and_port_problems(f, where)
    if isinstance(f, Classical):
        return out + _classical_problems(f, where, resolve)
    if not isinstance(f, CircuitCall):
        return out + [f"{where}: a {type(f).__name__} is neither a Classical fragment nor a CircuitCall"]
    if f.circuit is None:
        return out + [f"{where}: an execute fragment needs a circuit template"]
    return out + _circuit_call_problems(f, where, backends)


def _resource_and_port_problems(f, where: str) -> list[str]:
    """An unknown resource, ports of unknown types, and port names used twice."""
    out: list[str] = []
    if f.resource not in RESOURCES:
        out.append(f"{where}: unknown resource {f.resource!r}; resources are {', '.join(RESOURCES)}")
    for p in f.inputs + f.outputs:
        if p.type not in PORT_TYPES:
            out.append(f"{where}: port {p.name!r} has unknown type {p.type!r}; known: {', '.join(PORT_TYPES)}")
    for ports, what in ((f.inputs, "input"), (f.outputs, "output")):
        dup = [n for n, c in Counter(p.name for p in ports).items() if c > 1]
        if dup:
            out.append(f"{where}: duplicate {what} port(s) {dup}")
    return out


def _classical_problems(f: Classical, where: str, resolve: bool) -> list[str]:
    """A Classical fragment's job backends and function (imported with ``resolve``)."""
    out: list[str] = []
    if f.job_backends:
        bad = [b for b in f.job_backends if not isinstance(b, str) or not b]
        if bad:
            out.append(f"{where}: job_backends must be non-empty backend names, got {bad}")
        dup = [n for n, c in Counter(f.job_backends).items() if c > 1]
        if dup:
            out.append(f"{where}: duplicate job backend(s) {dup}")
    if not f.fn:
        out.append(f"{where}: a {f.kind} fragment needs a function")
    elif resolve:
        try:
            resolve_fn(f.fn)
        except GraphError as exc:
            out.append(f"{where}: {exc}")
    return out


def _circuit_call_problems(f: CircuitCall, where: str, backends) -> list[str]:
    """A CircuitCall's circuit, gradient method, ports and backend (checked against ``backends``)."""
    out = [f"{where}: {p}" for p in f.circuit.problems()]
    if f.gradient not in GRADIENTS:
        out.append(f"{where}: unknown gradient method {f.gradient!r}; use None or 'param-shift'")
    elif f.gradient and not f.circuit.observables:
        out.append(f"{where}: gradients need observables; the circuit only samples")
    ins, outs = execute_ports(f.circuit, f.gradient)
    if (ins, outs) != (f.inputs, f.outputs):
        out.append(
            f"{where}: ports ({', '.join(map(str, f.inputs))}) -> ({', '.join(map(str, f.outputs))}) "
            f"do not match its circuit, which needs ({', '.join(map(str, ins))}) -> ({', '.join(map(str, outs))})"
        )
    if not f.backend:
        out.append(f"{where}: an execute fragment needs a backend name")
    else:
        caps = _capabilities(f.backend, backends, out, where)
        if caps is not None and f.circuit.n_qubits > caps.max_qubits:
            out.append(
                f"{where}: circuit {f.circuit.name!r} has {f.circuit.n_qubits} qubits but backend "
                f"{f.backend!r} allows at most {caps.max_qubits}"
            )
    return out


def _capabilities(name, backends, out, where):
    """The ``Capabilities`` of backend ``name`` (None, with a problem noted, if unknown; None unchecked)."""
    if backends is None:
        return None
    if name not in backends:
        out.append(f"{where}: backend {name!r} is not among the backends given")
        return None
    b = backends[name]
    return b


def _edge_problems(graph: GraphLike) -> list[str]:
    out: list[str] = []
    frags = {f.name: f for f in graph.fragments}
    g_in = {p.name: p for p in graph.inputs}
    g_out = {p.name: p for p in graph.outputs}
    fed: Counter = Counter()
    used_inputs: set[str] = set()
    for e in graph.edges:
        src_port = _end(e.src, frags, g_in, output=True, edge=e, out=out)
        dst_port = _end(e.dst, frags, g_out, output=False, edge=e, out=out)
        if e.src[0] is None:
            used_inputs.add(e.src[1])
        if e.loop:
            if e.dst[0] is None or e.src[0] is None:
                out.append(f"edge {e}: a loop-carried edge must join two fragments")
            if not isinstance(e.max_staleness, int) or e.max_staleness < 0:
                out.append(f"edge {e}: max_staleness must be an integer >= 0, got {e.max_staleness!r}")
        if src_port and dst_port:
            fed[e.dst] += 1
            if not types_compatible(src_port.type, dst_port.type):
                out.append(f"edge {e}: type mismatch, {src_port.type} output into {dst_port.type} input")
    return out + _feed_problems(graph, fed, g_in, used_inputs)


def _feed_problems(graph: GraphLike, fed: Counter, g_in: dict, used_inputs: set[str]) -> list[str]:
    """Fragment inputs and graph outputs fed by no edge or by several, and graph inputs that feed nothing
    (``fed``: the edges into each ``(fragment, port)``, ``None`` for the graph's outputs)."""
    out: list[str] = []
    for f in graph.fragments:
        for p in f.inputs:
            n = fed[(f.name, p.name)]
            if n == 0:
                out.append(f"fragment {f.name!r}: input port {p.name!r} is not connected")
            elif n > 1:
                out.append(f"fragment {f.name!r}: input port {p.name!r} is fed by {n} edges")
    for p in graph.outputs:
        if fed[(None, p.name)] != 1:
            out.append(f"graph output {p.name!r} is fed by {fed[(None, p.name)]} edges (needs exactly 1)")
    for name in g_in:
        if name not in used_inputs:
            out.append(f"graph input {name!r} is not connected to any fragment")
    return out


def _end(end, frags, graph_ports, output, edge, out):
    frag, port = end
    if frag is None:
        p = graph_ports.get(port)
        if p is None:
            what = "input" if output else "output"
            out.append(f"edge {edge}: the graph has no {what} {port!r}")
        return p
    f = frags.get(frag)
    if f is None:
        out.append(f"edge {edge}: unknown fragment {frag!r}")
        return None
    p = f.port(port, output)
    if p is None:
        ports = f.outputs if output else f.inputs
        what = "output" if output else "input"
        have = ", ".join(x.name for x in ports) or "none"
        out.append(f"edge {edge}: fragment {frag!r} has no {what} port {port!r} (its {what}s: {have})")
    return p


def toposort(graph: GraphLike) -> list | None:
    """The fragments ordered by the non-loop edges (ties keep declaration order); None with a cycle."""
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


def cycle_message(graph: GraphLike) -> str:
    """The message for a cycle of non-loop edges (call it where ``toposort`` found one)."""
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
