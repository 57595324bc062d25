"""Write a ``CircuitTemplate`` directly in Python, without Qiskit or PennyLane.

    c = Circuit(2, name="demo")
    x = c.inputs("x", 2)            # per-sample symbols
    w = c.weights("w", 2)           # trainable symbols
    c.ry(x[0], 0).ry(2 * x[1] + 0.1, 1).cz(0, 1).rz(w[0], 0).rx(w[1], 1)
    template = c.build(observables=["Z0 Z1"])

Angles may be numbers or affine expressions ``a * symbol + b`` of one symbol. Every number becomes a float
where it is given: one that is not a real number, or an integer past a float's range, is a ``CircuitError``.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from .circuit import Angle, CircuitError, CircuitTemplate, Observable, Op, as_float
from .gates import GATES
from .text import number, shown

MAX_SYMBOLS = 2**20  # inputs or weights one call declares (a name each)


@dataclass(frozen=True)
class Sym:
    """An affine expression ``scale * symbol + offset`` during building."""

    kind: str
    index: int
    scale: float = 1.0
    offset: float = 0.0

    def __mul__(self, k: float) -> Sym:
        if isinstance(k, Sym):
            raise CircuitError("an angle must be affine in one symbol; a product of symbols is not")
        k = as_float(k, "angle expression: factor")
        return Sym(self.kind, self.index, self.scale * k, self.offset * k)

    __rmul__ = __mul__

    def __add__(self, k: float) -> Sym:
        if isinstance(k, Sym):
            raise CircuitError("an angle may depend on one symbol only (affine in one input or weight)")
        return Sym(self.kind, self.index, self.scale, self.offset + as_float(k, "angle expression: term"))

    __radd__ = __add__

    def __sub__(self, k: float) -> Sym:
        if isinstance(k, Sym):
            raise CircuitError("an angle may depend on one symbol only (affine in one input or weight)")
        return self + (-as_float(k, "angle expression: term"))

    def __rsub__(self, k: float) -> Sym:
        return (-self) + k

    def __truediv__(self, k: float) -> Sym:
        k = as_float(k, "angle expression: divisor")
        if k == 0.0:
            raise CircuitError("angle expression: division by 0")
        return self * (1.0 / k)

    def __neg__(self) -> Sym:
        return self * -1.0

    def angle(self) -> Angle:
        return Angle(self.kind, self.index, self.scale, self.offset)


class Circuit:
    """A mutable builder; ``build()`` returns the frozen, checked template."""

    def __init__(self, n_qubits: int, name: str = "circuit"):
        self.n_qubits, self.name = n_qubits, name
        self._ops: list[Op] = []
        self._inputs: list[str] = []
        self._weights: list[str] = []

    def inputs(self, prefix: str, n: int) -> list[Sym]:
        """``n`` per-sample symbols named ``prefix[0]``, ``prefix[1]``, ..."""
        return self._symbols("input", self._inputs, prefix, n)

    def weights(self, prefix: str, n: int) -> list[Sym]:
        """``n`` trainable symbols named ``prefix[0]``, ``prefix[1]``, ..."""
        return self._symbols("weight", self._weights, prefix, n)

    def _symbols(self, kind: str, names: list[str], prefix: str, n: int) -> list[Sym]:
        if not isinstance(prefix, str):
            raise CircuitError(f"{kind}s({shown(prefix)}, {shown(n)}): the name must be a string")
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 0 <= n <= MAX_SYMBOLS:
            raise CircuitError(f"{kind}s({shown(prefix)}, n): n must be an integer from 0 to {MAX_SYMBOLS:,}, "
                               f"got {number(n)}")
        start = len(names)
        names += [f"{prefix}[{i}]" for i in range(n)]
        return [Sym(kind, start + i) for i in range(n)]

    def gate(self, name: str, wires: Iterable[int], *angles: float | Sym) -> Circuit:
        if not isinstance(name, str) or name not in GATES:
            raise CircuitError(f"unknown gate {shown(name)}; known gates: {', '.join(sorted(GATES))}")
        spec = GATES[name]
        wires = tuple(wires)
        for w in wires:
            if isinstance(w, bool) or not isinstance(w, (int, np.integer)):
                order = f"{name}({', '.join(['angle'] * spec.num_params + ['wire'] * spec.num_wires)})"
                raise CircuitError(f"gate {name!r}: wire {shown(w)} is not an integer (the arguments are {order})")
        coerced = []
        for a in angles:
            if isinstance(a, Sym):
                coerced.append(a.angle())
                continue
            if isinstance(a, bool) or not isinstance(a, (int, float, np.integer, np.floating)):
                raise CircuitError(f"gate {name!r}: angle {shown(a)} is not a number or a symbol expression")
            coerced.append(Angle.const(as_float(a, f"gate {name!r} on wire(s) {_wires(wires)}: angle")))
        for a in coerced:
            if not (math.isfinite(a.scale) and math.isfinite(a.offset)):
                raise CircuitError(f"gate {name!r} on wire(s) {_wires(wires)}: angle {_angle_text(a)} is not finite")
        self._ops.append(Op(name, tuple(int(w) for w in wires), tuple(coerced)))
        return self

    def __getattr__(self, name: str):
        if name in GATES:
            spec = GATES[name]

            def add(*args):
                angles, wires = args[: spec.num_params], args[spec.num_params :]
                return self.gate(name, wires, *angles)

            add.__doc__ = f"{name}(*angles, *wires)"
            return add
        raise AttributeError(name)

    def build(self, observables: Iterable = (), shots: int | None = None) -> CircuitTemplate:
        return CircuitTemplate(
            self.n_qubits,
            tuple(self._ops),
            tuple(self._inputs),
            tuple(self._weights),
            tuple(Observable.coerce(o) for o in observables),
            shots,
            self.name,
        ).check()


def _wires(wires: tuple) -> str:
    return f"[{', '.join(number(w) for w in wires[:5])}{', ...' if len(wires) > 5 else ''}]"


def _angle_text(a: Angle) -> str:
    return f"{a.offset}" if a.kind == "const" else f"{a.scale} * {a.kind}[{a.index}] + {a.offset}"
