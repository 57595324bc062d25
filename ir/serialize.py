"""Graphs to and from JSON.

Functions are written as ``"module:qualname"``. A circuit is written as its
gates in plain data (``ops``: ``[gate, [wires], [[kind, index, scale, offset], ...]]``),
the input/weight split, derived inputs (``Expr`` JSON), the global phase's terms (``phase``, where
there are any: no value depends on them), the observables (as
``[coeff, "Z0 Z1"]`` terms) and the shots, and also as QPY (Qiskit's standard
binary format, base64) for other tools. hqflow reads ``ops``; documents of version
1 had only the QPY, which is read after its header has been checked against its
size. ``from_json`` bounds its input (size, nesting, number lengths), checks every
field's type before using it and gives one clear one-line ``GraphError`` for
malformed input; whether the graph makes sense is ``Graph.validate()``'s job.

Every fragment is written with the same fields (``fn``/``params`` null and empty for
an ``execute`` fragment, ``circuit``/``backend``/``gradient`` null for a classical
one; an ``execute`` fragment's ``spsa``, ``[samples, epsilon]``, only where it is set); ``kind`` picks the type read back: ``execute`` a ``CircuitCall``, any other
kind a ``Classical`` (an unknown kind loads, and ``validate`` names it). A field of
the other type that holds something is refused.

This module reads and writes a graph without importing ``hqflow.ir.graph`` (which
imports it): ``graph_to_json`` takes anything with ``Graph``'s fields,
``graph_parts`` returns the keywords that ``Graph.from_json`` builds the graph from.
"""
from __future__ import annotations

import dataclasses
import json
import math
import sys
from typing import Any

from .circuit import Angle, CircuitError, CircuitTemplate, Observable, Op, PauliTerm
from .expr import Expr
from .nodes import CircuitCall, Classical, Edge, Fragment, GraphError, GraphLike, Port
from .text import lone_surrogate, one_line

FORMAT, VERSION = "hqflow.graph", 2  # 2: circuits carry their gates as plain data ("ops")
MAX_CHARS = 64 * 2**20  # a graph document's size limit


def _ports(ports) -> list[dict]:
    return [{"name": p.name, "type": p.type} for p in ports]


def _circuit(t: CircuitTemplate) -> dict:
    from .qiskit_io import template_to_qpy

    return {
        "name": t.name,
        "n_qubits": t.n_qubits,
        "inputs": list(t.input_names),
        "weights": list(t.weight_names),
        "observables": [[[term.coeff, " ".join(f"{p}{w}" for w, p in term.paulis)] for term in o.terms] for o in t.observables],
        "shots": t.shots,
        # the gates over the input columns; the derived inputs travel as expressions beside them
        "ops": [[op.name, list(op.wires), [[a.kind, a.index, a.scale + 0.0, a.offset + 0.0] for a in op.angles]]
                for op in t.ops],
        # the same gates over the input columns in QPY, for other tools (hqflow reads "ops")
        "qpy": template_to_qpy(t.lowered()),
        **({"derived": [e.to_json() for e in t.derived]} if t.derived else {}),
        **({"phase": [[a.kind, a.index, a.scale + 0.0, a.offset + 0.0] for a in t.phase]} if t.phase else {}),
    }


def _fragment(f: Fragment) -> dict:
    """One fragment's object: the same keys, in the same order, for both types."""
    doc = {"name": f.name, "kind": f.kind, "resource": f.resource, "inputs": _ports(f.inputs),
           "outputs": _ports(f.outputs), "fn": None, "params": {}, "circuit": None, "backend": None, "gradient": None}
    if isinstance(f, Classical):
        doc.update(fn=f.fn, params=dict(f.params))
        if f.job_backends:
            doc["job_backends"] = list(f.job_backends)
    elif isinstance(f, CircuitCall):
        doc.update(circuit=None if f.circuit is None else _circuit(f.circuit), backend=f.backend, gradient=f.gradient)
        if f.spsa is not None:  # only when set: documents without it read as before
            doc["spsa"] = list(f.spsa)
    return doc


def graph_to_json(graph: GraphLike, indent: int | None = 2) -> str:
    def end(e):
        return [e[0], e[1]]

    doc = {
        "format": FORMAT,
        "version": VERSION,
        "name": graph.name,
        "inputs": _ports(graph.inputs),
        "outputs": _ports(graph.outputs),
        "fragments": [_fragment(f) for f in graph.fragments],
        "edges": [
            {"src": end(e.src), "dst": end(e.dst), "loop": e.loop, "max_staleness": e.max_staleness, "init": e.init,
             **({"start_empty": True} if e.start_empty else {})}
            for e in graph.edges
        ],
    }
    return json.dumps(doc, indent=indent)


def _read_names(f: Any, key: str, where: str) -> tuple[str, ...]:
    names = _get(f, key, where, list, [])
    if not all(isinstance(n, str) for n in names):
        raise GraphError(f"graph JSON: {where}: {key!r} must be a list of strings")
    return tuple(names)


def _get(d: Any, key: str, where: str, kind: type | tuple = object, default: Any = ...) -> Any:
    if not isinstance(d, dict):
        raise GraphError(f"graph JSON: {where} must be an object, got {type(d).__name__}")
    if key not in d:
        if default is not ...:
            return default
        raise GraphError(f"graph JSON: {where} lacks {key!r}")
    value = d[key]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise GraphError(f"graph JSON: {where}: {key!r} must be {names}, got {type(value).__name__}")
    return value


def _read_ports(d: dict, key: str, where: str) -> tuple[Port, ...]:
    ports = _get(d, key, where, list, [])
    return tuple(
        Port(_get(p, "name", f"{where} {key}[{i}]", str), _get(p, "type", f"{where} {key}[{i}]", str, "any"))
        for i, p in enumerate(ports)
    )


def _read_circuit(c: dict, where: str) -> CircuitTemplate:
    from .qiskit_io import template_from_qpy

    try:
        observables = tuple(
            Observable(tuple(PauliTerm.parse(text, coeff) for coeff, text in obs))
            for obs in _get(c, "observables", where, list, [])
        )
        inputs = _read_names(c, "inputs", where)
        weights = _read_names(c, "weights", where)
        derived = tuple(Expr.from_json(e) for e in _get(c, "derived", where, list, []))
        shots = _get(c, "shots", where, (int, type(None)), None)
        name = _get(c, "name", where, str, "circuit")
        if "ops" in c:
            n_qubits = _get(c, "n_qubits", where, int)
            ops = tuple(_read_op(op, f"{where}: op {k}") for k, op in enumerate(_get(c, "ops", where, list)))
            phase = _read_op(["phase", [], _get(c, "phase", where, list, [])], f"{where}: phase").angles
            return CircuitTemplate(n_qubits, ops, inputs, weights, observables, shots, name, derived, phase).check()
        # version 1: the gates only in QPY, which names a parameter per input column (inputs, then derived)
        columns = CircuitTemplate(1, (), inputs, weights, derived=derived).derived_names()
        lowered = template_from_qpy(_get(c, "qpy", where, str), inputs + columns, weights, observables, shots, name)
        return dataclasses.replace(lowered, input_names=inputs, derived=derived).check()
    except (CircuitError, TypeError, ValueError) as exc:
        if isinstance(exc, GraphError):
            raise
        raise GraphError(f"graph JSON: {where}: cannot read circuit: {exc}") from None


def _read_op(op: Any, where: str) -> Op:
    """``[name, [wires], [[kind, index, scale, offset], ...]]``, every field's type checked."""
    if not (isinstance(op, list) and len(op) == 3 and isinstance(op[0], str) and isinstance(op[1], list)
            and isinstance(op[2], list)):
        raise GraphError(f"graph JSON: {where} must be [gate, [wires], [angles]]")
    if not all(isinstance(w, int) and not isinstance(w, bool) for w in op[1]):
        raise GraphError(f"graph JSON: {where}: wires must be integers")
    angles = []
    for a in op[2]:
        if not (isinstance(a, list) and len(a) == 4 and a[0] in ("const", "input", "weight")
                and isinstance(a[1], int) and not isinstance(a[1], bool)
                and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in a[2:])):
            raise GraphError(f"graph JSON: {where}: an angle must be [const|input|weight, index, scale, offset] "
                             "with finite numbers")
        angles.append(Angle(a[0], a[1], float(a[2]), float(a[3])))
    return Op(op[0], tuple(op[1]), tuple(angles))


def _read_end(e: dict, key: str, where: str) -> tuple[str | None, str]:
    end = _get(e, key, where, list)
    if len(end) != 2 or not isinstance(end[1], str) or not isinstance(end[0], (str, type(None))):
        raise GraphError(f"graph JSON: {where}: {key!r} must be [fragment or null, port], got {end!r}")
    return end[0], end[1]


def _check_values(doc: Any) -> None:
    """Every string of the document is Unicode text (JSON's ``\\ud800`` escapes can hold a lone surrogate,
    which no output can write) and every integer fits a float (an angle, a coefficient or a count: hqflow
    computes with them as floats); one ``GraphError`` naming the first that is not."""
    stack = [(doc, "document")]
    while stack:
        value, where = stack.pop()
        if isinstance(value, str):
            if lone_surrogate(value) is not None:
                raise GraphError(f"graph JSON: {where}: the text holds {lone_surrogate(value)!r}, a lone surrogate, "
                                 "which is not Unicode text")
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > _LARGEST:
            raise GraphError(f"graph JSON: {where}: the integer of {len(str(abs(value)))} digits is out of range "
                             f"(at most {_LARGEST:.3g} in magnitude)")
        elif isinstance(value, dict):  # (pushed in reverse: the first in the document is named)
            stack.extend(reversed([x for k, v in value.items()
                                   for x in ((k, f"{where} (a key)"), (v, f"{where}.{one_line(str(k))[:40]}"))]))
        elif isinstance(value, list):
            stack.extend(reversed([(v, f"{where}[{i}]") for i, v in enumerate(value)]))


_LARGEST = int(sys.float_info.max)


def _read_fragment(f: Any, i: int) -> Fragment:
    """A ``CircuitCall`` for kind ``execute``, else a ``Classical``; a field of the other type that holds
    something is refused (a document hqflow wrote has them null or empty)."""
    where = f"fragment #{i}"
    name = _get(f, "name", where, str)
    where = f"fragment {name!r}"
    circuit = _get(f, "circuit", where, (dict, type(None)), None)
    kind = _get(f, "kind", where, str)
    inputs, outputs = _read_ports(f, "inputs", where), _read_ports(f, "outputs", where)
    fn = _get(f, "fn", where, (str, type(None)), None)
    resource = _get(f, "resource", where, str, "qpu" if kind == "execute" else "cpu")
    params = tuple(_get(f, "params", where, dict, {}).items())
    template = None if circuit is None else _read_circuit(circuit, where)
    backend = _get(f, "backend", where, (str, type(None)), None)
    gradient = _get(f, "gradient", where, (str, type(None)), None)
    spsa = _get(f, "spsa", where, (list, type(None)), None)
    job_backends = _read_names(f, "job_backends", where)
    if kind == "execute":
        held = [k for k, v in (("fn", fn), ("params", params), ("job_backends", job_backends)) if v]
        if held:
            raise GraphError(f"graph JSON: {where}: an execute fragment runs its circuit on its backend; it holds "
                             f"no {', '.join(map(repr, held))} (a classical fragment's fields)")
        return CircuitCall(name, kind, inputs, outputs, resource=resource, circuit=template, backend=backend,
                           gradient=gradient, spsa=None if spsa is None else tuple(spsa))
    held = [k for k, v in (("circuit", circuit), ("backend", backend), ("gradient", gradient), ("spsa", spsa))
            if v is not None]
    if held:
        raise GraphError(f"graph JSON: {where}: a {kind} fragment holds no {', '.join(map(repr, held))} "
                         "(an execute fragment's fields)")
    return Classical(name, kind, inputs, outputs, resource=resource, fn=fn, params=params, job_backends=job_backends)


def graph_parts(text: str) -> dict[str, Any]:
    """Read a graph document: the keywords of ``Graph(...)`` (``Graph.from_json`` builds the graph)."""
    if not isinstance(text, str):
        raise GraphError(f"a graph document is text (str), got {type(text).__name__}")
    if len(text) > MAX_CHARS:
        raise GraphError(f"graph document of {len(text):,} characters is larger than the {MAX_CHARS:,} allowed")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GraphError(f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise GraphError("graph JSON is nested too deeply") from None
    except ValueError as exc:  # an integer literal past Python's digit limit, say
        raise GraphError(f"not valid JSON: {' '.join(str(exc).split())[:120]}") from None
    _check_values(doc)
    fmt = _get(doc, "format", "document", str, FORMAT)
    if fmt != FORMAT:
        raise GraphError(f"graph JSON: format is {fmt!r}, expected {FORMAT!r}")
    version = _get(doc, "version", "document", int, VERSION)
    if version > VERSION:
        raise GraphError(f"graph JSON: version {version} is newer than this hqflow reads ({VERSION})")
    fragments = [_read_fragment(f, i) for i, f in enumerate(_get(doc, "fragments", "document", list))]
    edges = []
    for i, e in enumerate(_get(doc, "edges", "document", list)):
        where = f"edge #{i}"
        edges.append(
            Edge(
                _read_end(e, "src", where),
                _read_end(e, "dst", where),
                _get(e, "loop", where, bool, False),
                _get(e, "max_staleness", where, int, 0),
                _get(e, "init", where, object, None),
                _get(e, "start_empty", where, bool, False),
            )
        )
    return {
        "name": _get(doc, "name", "document", str, "graph"),
        "fragments": tuple(fragments),
        "edges": tuple(edges),
        "inputs": _read_ports(doc, "inputs", "document"),
        "outputs": _read_ports(doc, "outputs", "document"),
    }
