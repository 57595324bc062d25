"""The IR's nodes as plain data: ``Port``, the two fragment types, ``Edge``, and ``GraphError``.

Every fragment (``Fragment``, the base) has a name, a kind, typed input and output
ports and the resource it needs (``cpu``, ``gpu``, ``qpu``). There are two types:

* ``Classical`` — classical work, of kind ``preprocess``, ``prepare``, ``postprocess``
  or ``learn``: its function held by reference (``fn``, ``"module:qualname"``), JSON
  constants passed as keywords (``params``; a frozen dataclass is held tagged and passed
  rebuilt, see ``kwargs``), and the backend (pool) names it submits circuit jobs to
  itself (``job_backends``; an RL actor's policy forward passes).
* ``CircuitCall`` — a circuit call, of kind ``execute`` (always) on resource ``qpu``
  (by default): a ``CircuitTemplate`` (``circuit``), the backend name it runs on and
  its ``gradient`` method; its ports follow from the template (``execute_ports``).

``kind`` stays a field: it is data (written to JSON, drawn, and ``learn`` matters to
the scheduler); the type says which fields a fragment has. A ``Classical`` of kind
``execute``, a ``CircuitCall`` of another kind, or a bare ``Fragment`` is refused
with a one-line ``GraphError``. Code that branches on classical work versus a
circuit call tests the type: ``isinstance(f, CircuitCall)``.

This module imports no other module of the graph: ``validate``, ``serialize`` and
``draw`` build on it, and ``graph`` builds on them.
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import numbers
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import Any, Protocol

from .circuit import CircuitTemplate
from .text import one_line

KINDS = ("preprocess", "prepare", "execute", "postprocess", "learn")
CLASSICAL_KINDS = tuple(k for k in KINDS if k != "execute")
RESOURCES = ("cpu", "gpu", "qpu")
PORT_TYPES = ("any", "array", "tensor", "scalar", "int", "bool", "str", "list", "dict", "object")


class GradientMethod(str, Enum):
    """How a circuit's gradient is had: the one place its names are written. A method equals, prints and saves
    to JSON as its name, so graphs, configs and run directories that hold names keep working."""

    PARAM_SHIFT = "param-shift"
    """the exact shift rule: 1 + 2 x parameters circuits per row"""
    SPSA = "spsa"
    """simultaneous random perturbations: 2 x samples circuits per row, whatever the parameters; an estimate"""
    TWIN = "twin"
    """the backend's values, a local twin's gradient (``hqflow.torch.QuantumLayer`` only: no rows of its own)"""

    def __str__(self) -> str:  # and so format()
        return self.value

    def __repr__(self) -> str:
        return repr(self.value)  # a config prints as it did with names


GRADIENTS = (None, GradientMethod.PARAM_SHIFT, GradientMethod.SPSA)  # a CircuitCall's (a twin is a layer's)
SPSA_MAX_SAMPLES, SPSA_MAX_EPSILON = 1000, 3.2  # the bounds of an execute fragment's SPSA settings
DATACLASS = "__dataclass__"  # the tag of a frozen dataclass held as a param (see json_constant)


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
    """Input and output ports of an ``execute`` fragment (a ``CircuitCall``) running ``template``.

    Inputs: ``inputs`` ``[B, n_inputs]`` if the circuit has inputs, ``weights``
    ``[n_weights]`` if it has weights. Outputs: ``values`` ``[B, n_obs]`` with
    observables (plus ``stderr`` with shots), else ``probs`` (exact) or
    ``counts`` (shots); with a gradient (``"param-shift"`` or ``"spsa"``) also ``jacobian``
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
    """What every node of a graph has; a fragment is a ``Classical`` or a ``CircuitCall``.

    Only ``name`` and ``kind`` are positional after ``inputs`` and ``outputs``; ``resource``
    and the fields of the two types are keywords."""

    name: str
    kind: str
    inputs: tuple[Port, ...] = ()
    outputs: tuple[Port, ...] = ()
    resource: str = field(default="cpu", kw_only=True)

    def __post_init__(self) -> None:
        if type(self) is Fragment:
            raise GraphError(f"fragment {self.name!r}: a Fragment is built as one of its types, Classical "
                             "(a function) or CircuitCall (a circuit on a backend)")

    def port(self, name: str, output: bool) -> Port | None:
        for p in self.outputs if output else self.inputs:
            if p.name == name:
                return p
        return None


@dataclass(frozen=True)
class Classical(Fragment):
    """Classical work (kind ``preprocess``, ``prepare``, ``postprocess`` or ``learn``): ``fn`` is called
    with the input ports and ``params`` as keywords."""

    fn: str | None = field(default=None, kw_only=True)
    """the function, ``"module:qualname"`` (see ``fn_ref``)"""
    params: tuple[tuple[str, Any], ...] = field(default=(), kw_only=True)
    """JSON constants passed to ``fn`` as keywords, as ``(name, value)`` pairs; a frozen dataclass is held
    as its tagged JSON (``json_constant``) and passed rebuilt (``kwargs``)"""
    job_backends: tuple[str, ...] = field(default=(), kw_only=True)
    """backend (pool) names the fragment submits circuit jobs to itself, through
    ``hqflow.get_client()``; the scheduler gives those jobs the same pools, retries and spans
    as a ``CircuitCall``'s"""

    def __post_init__(self) -> None:
        if self.kind == "execute":
            raise GraphError(f"fragment {self.name!r}: an execute fragment is a CircuitCall (a circuit on a "
                             f"backend); a Classical fragment is one of {', '.join(CLASSICAL_KINDS)}")

    @cached_property  # kept in the instance's __dict__: not a field, so never compared, hashed or written
    def kwargs(self) -> dict[str, Any]:
        """``params`` as keywords, each tagged frozen dataclass rebuilt (once per fragment object)."""
        out = dict(self.params)
        for k, v in out.items():
            if isinstance(v, dict) and v.keys() == {DATACLASS, "fields"}:
                try:
                    out[k] = resolve_fn(v[DATACLASS])(**v["fields"])
                except Exception as exc:  # noqa: BLE001 - an import, or the class refusing its fields
                    raise GraphError(f"fragment {self.name!r}: param {k!r}: cannot rebuild {v[DATACLASS]}: "
                                     f"{exc}") from None
        return out


@dataclass(frozen=True)
class CircuitCall(Fragment):
    """A circuit call (kind ``execute``, always): ``circuit`` runs on backend ``backend``, with the
    ``gradient`` method (None, ``"param-shift"`` or ``"spsa"``); its ports are
    ``execute_ports(circuit, gradient)``."""

    kind: str = "execute"
    resource: str = field(default="qpu", kw_only=True)
    circuit: CircuitTemplate | None = field(default=None, kw_only=True)
    backend: str | None = field(default=None, kw_only=True)
    gradient: str | None = field(default=None, kw_only=True)
    spsa: tuple[int, float] | None = field(default=None, kw_only=True)
    """with ``gradient="spsa"``: ``(samples, epsilon)``, the directions per step (1 to 1000) and the
    perturbation's size (0 < epsilon <= 3.2); None: the runtime's defaults"""

    def __post_init__(self) -> None:
        if self.kind != "execute":
            raise GraphError(f"fragment {self.name!r}: a CircuitCall's kind is 'execute', not {self.kind!r}; "
                             f"{', '.join(CLASSICAL_KINDS)} work is a Classical fragment")
        if self.spsa is not None:
            object.__setattr__(self, "spsa", _spsa_settings(self.spsa, self.gradient, self.name))


def _spsa_settings(value: Any, gradient: str | None, name: str) -> tuple[int, float]:
    """``value`` as ``(samples, epsilon)``, or a one-line ``GraphError`` that names the problem."""
    where = f"fragment {name!r}"
    if gradient != GradientMethod.SPSA:
        raise GraphError(f"{where}: spsa settings {value!r} are for gradient={GradientMethod.SPSA!r}, not {gradient!r}")
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise GraphError(f"{where}: spsa must be (samples, epsilon), got {value!r}")
    k, eps = value
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 1 <= k <= SPSA_MAX_SAMPLES:
        raise GraphError(f"{where}: spsa samples must be an integer from 1 to {SPSA_MAX_SAMPLES}, got {k!r}")
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not 0 < eps <= SPSA_MAX_EPSILON:
        raise GraphError(f"{where}: spsa epsilon must be a number in (0, {SPSA_MAX_EPSILON}], got {eps!r}")
    return int(k), float(eps)


@dataclass(frozen=True)
class Edge:
    """Joins ``(fragment, port)`` pairs; a ``None`` fragment is the graph's own input (as a source) or
    output (as a destination). A loop-carried edge delivers step ``t``'s value to step ``t + 1``."""

    src: tuple[str | None, str]
    dst: tuple[str | None, str]
    loop: bool = False
    max_staleness: int = 0
    init: Any = None
    start_empty: bool = False  # a loop edge whose first value is None on purpose (init=None given)

    def __post_init__(self) -> None:
        if isinstance(self.init, dict) and DATACLASS in self.init:  # only Classical.kwargs rebuilds the tag
            raise GraphError(f"edge {self}: a loop's init is JSON data; a frozen dataclass is a fragment's param")

    def __str__(self) -> str:
        s = f"{self.src[0]}.{self.src[1]}" if self.src[0] else f"input.{self.src[1]}"
        d = f"{self.dst[0]}.{self.dst[1]}" if self.dst[0] else f"output.{self.dst[1]}"
        if not self.loop:
            return f"{s} -> {d}"
        return f"{s} ~> {d}  (loop-carried, max_staleness={self.max_staleness})"


class GraphLike(Protocol):
    """What ``validate``, ``serialize`` and ``draw`` read of a graph (``hqflow.ir.graph.Graph`` has it):
    they take a graph without importing ``graph``, which imports them."""

    name: str
    fragments: tuple[Fragment, ...]
    edges: tuple[Edge, ...]
    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]

    @property
    def loop_edges(self) -> tuple[Edge, ...]: ...


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
    """Turn numpy/torch values into JSON data; refuse what JSON cannot hold. A frozen dataclass (of a
    module-level class) becomes ``{"__dataclass__": "module:Qualname", "fields": <asdict() as JSON>}``, which
    ``Classical.kwargs`` rebuilds as ``Class(**fields)`` (lists for tuples: its ``__post_init__`` may coerce);
    a dict of one's own with the key ``"__dataclass__"`` is refused, so the tag is never ambiguous."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        if not cls.__dataclass_params__.frozen or "<locals>" in cls.__qualname__:
            raise GraphError(f"{what}: dataclass {cls.__qualname__} must be frozen and defined at module level "
                             "to be held as a param")
        return {DATACLASS: fn_ref(cls), "fields": json_constant(dataclasses.asdict(value), f"{what} (its fields)")}
    if isinstance(value, dict) and DATACLASS in value:
        raise GraphError(f"{what}: a dict with the key {DATACLASS!r} is refused (that key tags a frozen dataclass)")
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    if hasattr(value, "tolist"):
        value = value.tolist()
    try:
        # Round-trip, so the graph holds exactly what from_json would give back (tuples become lists).
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        raise GraphError(f"{what} must be JSON data (numbers, strings, lists, dicts), got {type(value).__name__}") from None
