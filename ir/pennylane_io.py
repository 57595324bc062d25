"""PennyLane at the edge: quantum functions in, ``CircuitTemplate`` out, and back.

``from_pennylane`` traces a quantum function written for PennyLane::

    def qfunc(inputs, weights):
        qml.AngleEmbedding(inputs, wires=range(2))
        qml.StronglyEntanglingLayers(weights.reshape(1, 2, 3), wires=range(2))
        return qml.expval(qml.Z(0) @ qml.Z(1))

    template = from_pennylane(qfunc, n_qubits=2, n_inputs=2, n_weights=6)

The function is always called as ``qfunc(inputs, weights)`` with two 1-D float
numpy arrays of lengths ``n_inputs`` and ``n_weights`` (empty when unused). Ops
outside hqflow's gate set are decomposed (PennyLane's own decompositions, applied
recursively) until only gates of ``hqflow.ir.gates.GATES`` remain. A ``GlobalPhase``
changes no expectation value or probability: the function's own (not one inside a
decomposition) becomes the template's ``phase``, so a weight it alone uses is the
template's, with a gradient of exactly 0; others are dropped.

Angles affine in one input or weight are found by probing: the conversion traces
once at a base point, once more per symbol with only that symbol moved (finite
differences of an affine map are exact), and once at an unrelated point to
confirm that ``scale * symbol + offset`` predicts every angle there. Probe points
are fixed dyadic numbers, so conversion is deterministic and simple expressions
(``x``, ``2 * x + 0.5``, ``w / 8``) come out exactly. A gate sequence that changes
with the values (control flow, values used as bits) is rejected.

Angles that are other functions of the inputs (``IQPEmbedding``'s products
``x_i x_j``, ``sin(x)``, sums of several inputs) become derived inputs
(``CircuitTemplate.derived``): the function is traced once more with symbolic
inputs and weights, and the formula it records is checked against the function
at a probe point where both are defined. So does an angle that is affine only
where it is defined (``x + 0 * log(x)``): its rows outside the domain are refused.
Probe points come in families (small, large, negative, ...): the first family at
which every angle is a number serves, so ``arcsin(x)`` and ``log(x - 1)`` convert. An
angle that mixes inputs and weights (``w * x``), or is not affine in a weight, is
rejected. ``AmplitudeEmbedding`` (and ``StatePrep`` of inputs) on wires that no
gate has touched yet is prepared by a real-amplitude ``RY`` tree
(``hqflow.ir.stateprep``) whose angles are derived inputs; complex amplitudes are
rejected.

``to_pennylane`` goes the other way; ``apply_template`` is its core, shared with
the ``pennylane:<device>`` backend.

PennyLane records operations on a process-wide queue, so tracing in two threads
at once can mix their operations. Everything in hqflow that traces PennyLane code
holds ``PENNYLANE_LOCK``.
"""
from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pennylane as qml

from . import expr as ex
from .circuit import MAX_QUBITS, Angle, CircuitError, CircuitTemplate, Observable, Op, PauliTerm, too_many_qubits
from .gates import GATES
from .stateprep import amplitude_gates

PENNYLANE_LOCK = threading.RLock()
_LIBRARIES = ("numpy", "pennylane", "autoray", "scipy", "hqflow.ir")


def _adjoint(cls: type) -> Callable[..., qml.operation.Operator]:
    return lambda wires: qml.adjoint(cls(wires=wires))


# hqflow gate -> (PennyLane op name, constructor(*angles, wires=...)). The angle
# conventions agree gate by gate (see hqflow.ir.gates).
_GATE_TABLE: dict[str, tuple[str, Callable[..., qml.operation.Operator]]] = {
    "id": ("Identity", qml.Identity),
    "h": ("Hadamard", qml.Hadamard),
    "x": ("PauliX", qml.PauliX),
    "y": ("PauliY", qml.PauliY),
    "z": ("PauliZ", qml.PauliZ),
    "s": ("S", qml.S),
    "sdg": ("Adjoint(S)", _adjoint(qml.S)),
    "t": ("T", qml.T),
    "tdg": ("Adjoint(T)", _adjoint(qml.T)),
    "sx": ("SX", qml.SX),
    "sxdg": ("Adjoint(SX)", _adjoint(qml.SX)),
    "rx": ("RX", qml.RX),
    "ry": ("RY", qml.RY),
    "rz": ("RZ", qml.RZ),
    "p": ("PhaseShift", qml.PhaseShift),
    "u": ("U3", qml.U3),
    "cx": ("CNOT", qml.CNOT),
    "cy": ("CY", qml.CY),
    "cz": ("CZ", qml.CZ),
    "swap": ("SWAP", qml.SWAP),
    "crx": ("CRX", qml.CRX),
    "cry": ("CRY", qml.CRY),
    "crz": ("CRZ", qml.CRZ),
    "cp": ("ControlledPhaseShift", qml.ControlledPhaseShift),
    "rxx": ("IsingXX", qml.IsingXX),
    "ryy": ("IsingYY", qml.IsingYY),
    "rzz": ("IsingZZ", qml.IsingZZ),
    "ccx": ("Toffoli", qml.Toffoli),
    "cswap": ("CSWAP", qml.CSWAP),
}
_FROM_PENNYLANE = {pl: hq for hq, (pl, _) in _GATE_TABLE.items()}
_DROPPED = {"GlobalPhase"}
_PHASE = "global phase"  # the function's own GlobalPhase, traced as a gate without wires
_PAULI_OPS = {"X": qml.PauliX, "Y": qml.PauliY, "Z": qml.PauliZ}
_MAX_DEPTH = 32  # decomposition levels before giving up


# ---------------------------------------------------------------- from PennyLane


def from_pennylane(
    qfunc: Callable[[np.ndarray, np.ndarray], Any],
    n_qubits: int,
    n_inputs: int = 0,
    n_weights: int = 0,
    observables: Any = None,
    shots: int | None = None,
    name: str | None = None,
    input_names: Sequence[str] | None = None,
    weight_names: Sequence[str] | None = None,
) -> CircuitTemplate:
    """Trace ``qfunc(inputs, weights)`` into a checked ``CircuitTemplate``.

    Wires must be the integers ``0 .. n_qubits - 1``. The observables are the
    ``qml.expval(...)`` measurements ``qfunc`` returns (one, or a list/tuple), or
    ``observables`` (a list with one entry per observable: a PennyLane Pauli-sum
    operator, an ``Observable``, ``"Z0 Z1"`` or ``[(coeff, "Z0 Z1"), ...]``), not
    both. A function that returns nothing, or ``qml.probs()``/``qml.counts()``/
    ``qml.sample()`` over all wires, gives a sampled template (no observables).
    Inputs are named ``x[i]`` and weights ``w[j]`` unless names are given.
    Raises ``CircuitError`` for anything that does not fit a template.
    """
    if not isinstance(n_qubits, (int, np.integer)) or isinstance(n_qubits, bool) or n_qubits < 1:
        raise CircuitError(f"n_qubits must be a positive integer, got {n_qubits!r}")
    if n_qubits > MAX_QUBITS:
        raise CircuitError(too_many_qubits(n_qubits))
    label = name or getattr(qfunc, "__name__", "circuit")
    input_names = _names(input_names, n_inputs, "x", "input")
    weight_names = _names(weight_names, n_weights, "w", "weight")
    tracer = _Tracer(qfunc, int(n_qubits), int(n_inputs), label)
    gates, angles, derived, phase, (measured, measured_elsewhere) = _fit_angles(tracer, input_names + weight_names)

    traced_obs, sampled = _read_measurements(measured, tracer)
    if _read_measurements(measured_elsewhere, tracer)[0] != traced_obs:
        raise CircuitError(f"circuit {label!r}: observable coefficients must not depend on inputs or weights")
    if observables is not None:
        if traced_obs or sampled:
            raise CircuitError(
                f"observables given twice: {label!r} returns measurements and observables= was passed too; "
                "use one or the other"
            )
        traced_obs = _coerce_observables(observables, int(n_qubits))

    ops, it = [], iter(angles)
    for gate in gates:
        op = Op(gate.name, gate.wires, tuple(next(it) for _ in gate.params))
        ops += [op] if gate.name != _PHASE else []
    return CircuitTemplate(
        int(n_qubits), tuple(ops), input_names, weight_names, traced_obs, shots, label, tuple(derived), phase
    ).check()


def _fit_angles(
    tracer: _Tracer, symbols: tuple[str, ...]
) -> tuple[list[_Gate], list[Angle], list[ex.Expr], tuple[Angle, ...], tuple[list, list]]:
    """Trace at probe points and fit every gate angle as ``scale * symbol + offset``, or as a
    derived input (a function of the inputs, traced symbolically).

    Returns the gates, their angles (flattened, in gate order), the derived inputs, the global phase's
    terms (a term ``-slope * symbol`` per symbol a ``GlobalPhase`` moves with) and the measurements of
    the base and check traces.
    """
    label, n_inputs = tracer.label, tracer.n_inputs
    base, steps, check, gates, measurements, slopes = _probe(tracer, symbols)
    angles0 = _angle_vector(gates)
    depends = np.abs(slopes) * steps[:, None] > 1e-10 * (1.0 + np.abs(angles0))
    checks = _CheckPoints(tracer, gates, [check, base + steps / 2])
    actual, moved_measurements = checks.primary()

    flat = [(g, j) for g in gates for j in range(len(g.params))]
    angles: list[Angle | None] = []
    phase = []
    for i, (gate, j) in enumerate(flat):
        uses = np.flatnonzero(depends[:, i])
        if gate.name == _PHASE:  # GlobalPhase(t) is exp(-i t)
            phase += [Angle.input(k, -slopes[k, i]) if k < n_inputs else Angle.weight(k - n_inputs, -slopes[k, i])
                      for k in uses]
        if len(uses) == 0 or gate.name == _PHASE:
            angles.append(Angle.const(angles0[i]))
            continue
        k = int(uses[0])
        scale = slopes[k, i]
        offset = angles0[i] - scale * base[k]
        a = Angle.input(k, scale, offset) if k < n_inputs else Angle.weight(k - n_inputs, scale, offset)
        fits = len(uses) == 1 and abs(_evaluate(a, checks.point, n_inputs) - actual[i]) <= 1e-8 * (1.0 + abs(actual[i]))
        angles.append(a if fits else None)  # None: not affine in one symbol; traced symbolically below

    traced = _symbolic_trace(tracer, base, gates, symbols)
    if traced[0] is not None:  # affine where defined, but not everywhere: a derived input refuses the other rows
        plain = [i for i, a in enumerate(angles) if a is not None and a.kind != "weight" and flat[i][0].name != _PHASE]
        for i, e in zip(plain, _symbolic_angles(tracer, gates, traced, [flat[i] for i in plain])):
            if _restricted(e) and {kind for kind, _ in e.symbols()} == {"input"}:
                angles[i] = None
    derived: list[ex.Expr] = []
    other = [i for i, a in enumerate(angles) if a is None]
    if other:
        formulas = _symbolic_angles(tracer, gates, traced, [flat[i] for i in other])
        for i, e in zip(other, formulas):
            gate, j = flat[i]
            where = f"circuit {label!r}, {gate.where}: angle {j}"
            _check_formula(e, where, symbols, n_inputs, checks, i)
            if e not in derived:
                derived.append(e)
            angles[i] = Angle.input(n_inputs + derived.index(e))
    return gates, angles, derived, tuple(phase), (measurements, moved_measurements)


# Probe families, each (base, step, check) ranges: the first serves most functions; the others are tried
# in turn where an angle is not a finite number at the first's probes (arcsin(x) needs |x| <= 1, log(x - 1)
# needs x > 1, log(-x) needs x < 0, log(x0 - x1) needs x0 > x1).
_FAMILIES = (
    ((0.25, 1.25), (0.5, 1.0), (-1.25, -0.25)),
    ((0.0625, 0.3125), (0.03125, 0.125), (-0.3125, -0.0625)),
    ((1.25, 2.5), (0.25, 0.5), (-2.5, -1.25)),
    ((-1.25, -0.25), (0.0625, 0.1875), (0.25, 1.25)),
    ((2.5, 5.0), (0.25, 0.5), (-5.0, -2.5)),
    ((-2.0, 2.0), (0.0625, 0.125), (-2.0, 2.0)),
    ((-2.0, 2.0), (0.0625, 0.125), (-2.0, 2.0)),
    ((-2.0, 2.0), (0.0625, 0.125), (-2.0, 2.0)),
)


def _probe(tracer: _Tracer, symbols: tuple[str, ...]) -> tuple:
    """The base point, steps and check point of the first probe family at which every angle is a finite
    number, with the gates and measurements traced at the base and the slopes ``[n_symbols, n_angles]``
    (finite differences of one symbol at a time)."""
    failed = None
    for family, ranges in enumerate(_FAMILIES):
        rng = np.random.default_rng(7 + family)
        base, steps, check = (_dyadic(rng, len(symbols), lo, hi) for lo, hi in ranges)
        try:
            gates, measurements = tracer.trace(base, first=True)
            angles0 = _angle_vector(gates)
            slopes = np.zeros((len(symbols), angles0.size))
            bad = _nonfinite(angles0, base)
            for k in range(len(symbols)):
                if bad is not None:
                    break
                probe = base.copy()
                probe[k] += steps[k]
                moved, _ = tracer.trace(probe, same_as=gates, moved=symbols[k])
                bad = _nonfinite(_angle_vector(moved), probe)
                slopes[k] = (_angle_vector(moved) - angles0) / steps[k]
        except CircuitError:
            if family == 0:  # the function fails, or changes its gates, at the first family's probes
                raise
            continue
        if bad is None:
            return base, steps, check, gates, measurements, slopes
        failed = failed or (gates, *bad)
    gates, i, point = failed
    flat = [(g, j) for g in gates for j in range(len(g.params))]
    gate, j = flat[i]
    shown = np.array2string(point[: tracer.n_inputs], precision=4, threshold=6)
    raise CircuitError(
        f"circuit {tracer.label!r}, {gate.where}: angle {j} is not a finite number at the sample inputs hqflow "
        f"traces the function at (such as {shown}, and others in [-5, 5]); compute that feature classically "
        "and pass it in as an input")


def _nonfinite(angles: np.ndarray, point: np.ndarray) -> tuple[int, np.ndarray] | None:
    bad = np.flatnonzero(~np.isfinite(angles))
    return None if bad.size == 0 else (int(bad[0]), point)


class _CheckPoints:
    """Points away from the base, traced on demand, at which fitted angles and traced formulas are compared
    with the function: the family's check point first (on the other side of zero, where branches on
    values show), then the middle of the base and step probes (inside the domain that the probes found:
    ``log(x)`` has no value at the check point)."""

    def __init__(self, tracer: _Tracer, gates: list[_Gate], points: list[np.ndarray]):
        self.tracer, self.gates, self.points = tracer, gates, points
        self._traced: dict[int, tuple[np.ndarray, list] | CircuitError] = {}
        self.index = 0

    def angles(self, k: int) -> tuple[np.ndarray, list] | None:
        """The angles and measurements traced at point ``k``, or None where calling the function there fails."""
        if k not in self._traced:
            try:
                moved, measured = self.tracer.trace(self.points[k], same_as=self.gates, moved="the inputs and weights")
                self._traced[k] = (_angle_vector(moved), measured)
            except _CallFailed as exc:
                self._traced[k] = exc
        got = self._traced[k]
        return None if isinstance(got, CircuitError) else got

    def primary(self) -> tuple[np.ndarray, list]:
        """The angles and measurements at the first point where calling the function works."""
        for k in range(len(self.points)):
            got = self.angles(k)
            if got is not None:
                self.index = k
                return got
        raise self._traced[0]

    @property
    def point(self) -> np.ndarray:
        return self.points[self.index]


def _symbolic_trace(tracer: _Tracer, base: np.ndarray, gates: list[_Gate],
                    symbols: tuple[str, ...]) -> tuple[list[_Gate] | None, Exception | None]:
    """One trace with symbols in place of the numbers: its gates (angles carry formulas), or the
    error that stopped it. A comparison of a symbol in the user's code (a branch on a value) is a
    ``CircuitError``: the probes cannot see a branch whose threshold lies beyond them."""
    n = tracer.n_inputs
    values = np.empty(len(symbols), dtype=object)
    for k, v in enumerate(base):
        values[k] = _Traced(ex.input(k) if k < n else ex.weight(k - n), float(v))
    _Traced.compared = []
    try:
        sym_gates, _ = tracer.trace(values, same_as=gates, moved="the symbols")
    except CircuitError:
        raise
    except Exception as exc:  # the user's code, or PennyLane's, could not work on symbols
        return None, exc
    finally:
        compared, _Traced.compared = _Traced.compared, None
    if compared:
        e, op, other = compared[0]
        raise CircuitError(
            f"circuit {tracer.label!r}: the function compares {e.format(symbols[:n], symbols[n:])} {op} {other} "
            "(control flow on the values of inputs or weights); a template needs a gate sequence that does not "
            "depend on the values: compute such choices classically, outside the circuit")
    return sym_gates, None


def _restricted(e: ex.Expr) -> bool:
    """Whether the formula uses a function that is undefined somewhere (``log``, ``sqrt``, ``arcsin``, a
    division, ...): then an angle that the probes found affine (``x + 0 * log(x)``, ``x / x``) is affine only
    where it is defined."""
    if e.op in ("log", "sqrt", "arcsin", "arccos", "tan", "guard"):
        return True
    if e.op == "pow":
        exponent = e.args[1]
        if not exponent.is_const or exponent.value < 0 or not float(exponent.value).is_integer():
            return True
    return any(_restricted(a) for a in e.args)


def _symbolic_angles(tracer: _Tracer, gates: list[_Gate], traced: tuple[list[_Gate] | None, Exception | None],
                     wanted: list[tuple[_Gate, int]]) -> list[ex.Expr]:
    """The formulas of the ``wanted`` angles, from the symbolic trace."""
    sym_gates, exc = traced
    if sym_gates is None:
        gate, j = wanted[0]
        raise CircuitError(
            f"circuit {tracer.label!r}, {gate.where}: angle {j} is not affine in one input or weight, and "
            f"tracing its formula failed ({type(exc).__name__}: {_one_line(exc)}); compute that feature "
            "classically and pass it in as an input")
    where = {id(g): s for g, s in zip(gates, sym_gates)}
    return [_Traced.lift(where[id(g)].params[j]).expr for g, j in wanted]


def _check_formula(e: ex.Expr, where: str, symbols: tuple[str, ...], n_inputs: int, checks: _CheckPoints,
                   i: int) -> None:
    """A traced formula is a function of the inputs alone, and gives the traced angle ``i`` at the first check
    point where both are finite numbers (the formula ``log(x)`` is checked where ``x > 0``)."""
    kinds = {kind for kind, _ in e.symbols()}
    names = ", ".join(symbols[i if kind == "input" else n_inputs + i] for kind, i in sorted(e.symbols()))
    if "weight" in kinds and "input" in kinds:
        raise CircuitError(
            f"{where} mixes inputs and weights ({names}); a template angle is a function of the inputs or affine "
            "in one weight, not both: rotate by the input part and the weight part in two gates, or compute the "
            "product classically (e.g. in a torch layer) and pass it in as an input")
    if "weight" in kinds or not kinds:
        raise CircuitError(f"{where} is not affine in weight(s) {names}; a weight must enter as a*w + b "
                           "(functions of the inputs are fine: they become derived inputs)")
    for k, point in enumerate(checks.points):
        traced = checks.angles(k)
        with np.errstate(all="ignore"):
            got = float(ex.evaluate(e, point[None, :n_inputs], np)[0])
        if traced is None or not (np.isfinite(got) and np.isfinite(traced[0][i])):
            continue  # outside the formula's or the function's domain: the next point
        actual = float(traced[0][i])
        if not abs(got - actual) <= 1e-8 * (1.0 + abs(actual)):
            raise CircuitError(
                f"{where} depends on the inputs ({names}) in a way that changes with their values (branches or "
                f"rounding on values?): the traced formula {e.format(symbols[:n_inputs])} gives {got} where the "
                f"function gives {actual}; compute that feature classically and pass it in as an input")
        return
    raise CircuitError(
        f"{where}: the traced formula {e.format(symbols[:n_inputs])} cannot be checked: it or the function is "
        "not a finite number at every sample input hqflow tried; compute that feature classically and pass "
        "it in as an input")


def _without_common_scale(amps: list[_Traced]) -> list[_Traced]:
    """The amplitudes without a positive factor they all share (``normalize=True``'s ``1/|x|``): the
    state's angles are ratios, so the formulas lose nothing and stay small."""

    def factors(e: ex.Expr) -> tuple[ex.Expr, ...]:
        return e.args if e.op == "mul" else (e,)

    def positive(f: ex.Expr) -> bool:
        inner = f.args[0] if f.op == "pow" and f.args[1].is_const else f
        return inner.op in ("sqrt", "exp") or (inner.op == "pow" and inner.args[1].is_const and
                                               inner.args[1].value % 2 == 0)

    scaled = [a.expr for a in amps if not (a.expr.is_const and a.expr.value == 0.0)]
    if not scaled:
        return amps
    common = [f for f in factors(scaled[0]) if positive(f) and all(f in factors(e) for e in scaled[1:])]
    if not common:
        return amps
    out = []
    for a in amps:
        fs = list(factors(a.expr))
        for f in common:
            if f in fs:
                fs.remove(f)
        out.append(_Traced(ex.mul(*fs) if len(fs) != 1 else fs[0], a.val))  # val: only the sign matters here
    return out


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 160 else text[:157] + "..."


class _Traced:
    """A symbol while a function is traced: its formula (``Expr``) and its value at the base point.

    Arithmetic and numpy's functions build the formula; comparisons, ``float`` and ``bool``
    use the value (code that branches on values is caught by ``_check_formula``, which
    compares the formula with a trace at points on the other side of zero)."""

    __slots__ = ("expr", "val")
    compared: list | None = None  # while tracing: the comparisons of symbols made outside the libraries

    def __init__(self, expr: ex.Expr, val: float):
        self.expr, self.val = expr, val

    @staticmethod
    def lift(v: Any) -> _Traced:
        if isinstance(v, _Traced):
            return v
        if isinstance(v, np.ndarray) and v.ndim == 0:
            return _Traced.lift(v.item())
        if isinstance(v, (complex, np.complexfloating)):
            if v.imag:
                raise TypeError(f"complex value {v}")
            v = v.real
        return _Traced(ex.const(float(v)), float(v))

    def _op(self, name: str, *others: Any, fn: Callable[..., float]) -> _Traced:
        args = [self] + [_Traced.lift(o) for o in others]
        return _Traced(ex.apply(name, *(a.expr for a in args)), fn(*(a.val for a in args)))

    def __add__(self, o):
        return self._op("add", o, fn=lambda a, b: a + b)

    def __radd__(self, o):
        return _Traced.lift(o) + self

    def __sub__(self, o):
        return self + (-_Traced.lift(o))

    def __rsub__(self, o):
        return _Traced.lift(o) + (-self)

    def __mul__(self, o):
        return self._op("mul", o, fn=lambda a, b: a * b)

    def __rmul__(self, o):
        return _Traced.lift(o) * self

    def __truediv__(self, o):
        return self * _Traced.lift(o) ** -1.0

    def __rtruediv__(self, o):
        return _Traced.lift(o) * self ** -1.0

    def __pow__(self, o):
        return self._op("pow", o, fn=lambda a, b: a ** b)

    def __rpow__(self, o):
        return _Traced.lift(o) ** self

    def __neg__(self):
        return self * -1.0

    def __pos__(self):
        return self

    def __abs__(self):
        return self._op("abs", fn=abs)

    def __float__(self):
        return float(self.val)

    def __bool__(self):
        self._note("!=", 0)
        return bool(self.val)

    def __lt__(self, o):
        self._note("<", o)
        return self.val < float(o)

    def __le__(self, o):
        self._note("<=", o)
        return self.val <= float(o)

    def __gt__(self, o):
        self._note(">", o)
        return self.val > float(o)

    def __ge__(self, o):
        self._note(">=", o)
        return self.val >= float(o)

    def _note(self, op: str, other: Any) -> None:
        """Record a comparison made by the user's code (numpy's and PennyLane's own checks, such as a
        norm's ``allclose``, validate values and do not choose gates)."""
        caller = sys._getframe(2).f_globals.get("__name__", "")
        if _Traced.compared is not None and not caller.startswith(_LIBRARIES):
            shown = other.expr.format() if isinstance(other, _Traced) else repr(other)
            _Traced.compared.append((self.expr, op, shown))

    def conjugate(self):  # the symbols are real
        return self

    def arctan2(self, o):
        return self._op("arctan2", o, fn=np.arctan2)

    def guard(self, c):
        """Itself where ``c`` is not 0 (``hqflow.ir.expr``'s ``guard``)."""
        return self._op("guard", c, fn=lambda v, cv: v if cv != 0 else float("nan"))


def _traced_function(name: str) -> Callable[[_Traced], _Traced]:
    scalar = getattr(np, name)
    return lambda self: self._op(name, fn=lambda v: float(scalar(v)))


for _name in ("sin", "cos", "tan", "arcsin", "arccos", "arctan", "exp", "log", "sqrt"):
    setattr(_Traced, _name, _traced_function(_name))


def _register_traced() -> None:
    """PennyLane dispatches on a value's type (autoray): symbols are handled as numpy scalars."""
    import autoray

    autoray.register_backend(_Traced, "numpy")


_register_traced()


class _CallFailed(CircuitError):
    """The user's function raised at sample inputs (a check point may lie outside its domain)."""


class _Gate:
    """One traced hqflow gate with its numeric angles and where it came from."""

    def __init__(self, name: str, wires: tuple[int, ...], params: list[float], where: str):
        self.name, self.wires, self.params, self.where = name, wires, params, where

    def key(self) -> tuple:
        return self.name, self.wires, len(self.params)


class _Tracer:
    """Runs the user's function on given symbol values and lowers it to hqflow gates.

    Values are numbers, or ``_Traced`` symbols (an object array): then the gates' angles are
    ``_Traced`` too, carrying their formulas."""

    def __init__(self, qfunc: Callable, n_qubits: int, n_inputs: int, label: str):
        self.qfunc, self.n_qubits, self.n_inputs, self.label = qfunc, n_qubits, n_inputs, label

    def trace(
        self, values: np.ndarray, first: bool = False, same_as: list[_Gate] | None = None, moved: str = ""
    ) -> tuple[list[_Gate], list]:
        x, w = values[: self.n_inputs].copy(), values[self.n_inputs :].copy()
        symbolic = values.dtype == object
        with PENNYLANE_LOCK, np.errstate(all="ignore"):  # sample inputs may lie outside a function's domain
            try:
                tape = qml.tape.make_qscript(self.qfunc)(x, w)
            except CircuitError:
                raise
            except Exception as exc:
                if symbolic:
                    raise
                hint = ("; hqflow traces the function at sample inputs that are not normalized: use "
                        "AmplitudeEmbedding(..., normalize=True)" if "norm" in str(exc) else "")
                raise _CallFailed(f"circuit {self.label!r}: calling it with sample inputs and weights failed: "
                                  f"{type(exc).__name__}: {_one_line(exc)}{hint}") from None
            if first:
                for item in list(tape.operations) + list(tape.measurements):
                    self.check_wires(item.wires, getattr(item, "name", type(item).__name__))
            with qml.QueuingManager.stop_recording():
                gates: list[_Gate] = []
                for k, op in enumerate(tape.operations):
                    self._lower(op, f"operation {k} ({op.name})", gates, symbolic, top=True)
        if same_as is not None and [g.key() for g in gates] != [g.key() for g in same_as]:
            raise CircuitError(
                f"circuit {self.label!r}: the gate sequence changes with the values of {moved} "
                "(control flow on values, or values used as bits or wires?); a template needs a fixed "
                "gate sequence with angles affine in the inputs and weights"
            )
        return gates, list(tape.measurements)

    def check_wires(self, wires: qml.wires.Wires, what: str) -> None:
        for w in wires:
            if not isinstance(w, (int, np.integer)) or isinstance(w, bool) or not 0 <= w < self.n_qubits:
                raise CircuitError(
                    f"circuit {self.label!r}: {what} uses wire {w!r}; wires must be the integers "
                    f"0..{self.n_qubits - 1}"
                )

    def _lower(self, op: qml.operation.Operator, where: str, out: list[_Gate], symbolic: bool, top: bool = False,
               depth: int = 0) -> None:
        """Append ``op``'s hqflow gates to ``out``."""
        if isinstance(op, qml.ops.MidMeasure) or isinstance(op, qml.ops.Conditional):
            raise CircuitError(f"circuit {self.label!r}: {where}: mid-circuit measurements are not supported")
        if op.name in _DROPPED:
            if top:
                out.append(_Gate(_PHASE, (), [self._angle(op.parameters[0], where, symbolic)], where))
            return
        hq = _FROM_PENNYLANE.get(op.name)
        if hq is not None:
            here = where if top else f"gate {op.name} on wires {list(op.wires)} (from {where})"
            if hq == "id":
                out.extend(_Gate("id", (int(w),), [], here) for w in op.wires)
                return
            params = [self._angle(p, here, symbolic) for p in op.parameters]
            out.append(_Gate(hq, tuple(int(w) for w in op.wires), params, here))
            return
        if isinstance(op, qml.StatePrep) and not getattr(op, "is_sparse", False):
            self._state_prep(op, where, out, symbolic)
            return
        if not op.has_decomposition or depth >= _MAX_DEPTH:
            raise CircuitError(
                f"circuit {self.label!r}: {where}: {op.name} is not supported and has no decomposition into "
                f"hqflow gates ({', '.join(sorted(GATES))})"
            )
        for sub in op.decomposition():
            self._lower(sub, where, out, symbolic, depth=depth + 1)

    def _angle(self, p: Any, here: str, symbolic: bool) -> Any:
        if symbolic and (isinstance(p, _Traced) or (isinstance(p, np.ndarray) and p.dtype == object)):
            if np.ndim(p) != 0:
                raise CircuitError(f"{here}: angles must be real scalars, got an array of shape {np.shape(p)}")
            return _Traced.lift(p)
        if np.ndim(p) != 0 or np.iscomplexobj(p):
            raise CircuitError(f"{here}: angles must be real scalars, got {p!r}")
        return _Traced.lift(float(p)) if symbolic else float(p)

    def _state_prep(self, op: qml.operation.Operator, where: str, out: list[_Gate], symbolic: bool) -> None:
        """``StatePrep``/``AmplitudeEmbedding`` of real amplitudes on untouched wires: an ``RY`` tree."""
        wires = [int(w) for w in op.wires]
        touched = sorted({w for g in out for w in g.wires}.intersection(wires))
        if touched:
            raise CircuitError(f"circuit {self.label!r}: {where}: {op.name} must come before any gate on its wires "
                               f"(wire(s) {touched} already have gates); it prepares a state from |0...0>")
        state = op.parameters[0]
        if np.ndim(state) != 1:
            raise CircuitError(f"circuit {self.label!r}: {where}: {op.name} takes one amplitude vector, got an "
                               f"array of shape {np.shape(state)} (batches are rows of the inputs instead)")
        try:
            amps = [_Traced.lift(a) if symbolic else float(np.real_if_close(a, tol=1e6)) for a in state]
        except (TypeError, ValueError):
            amps = None
        if amps is None or (not symbolic and np.iscomplexobj(np.real_if_close(np.asarray(state), tol=1e6))):
            raise CircuitError(f"circuit {self.label!r}: {where}: {op.name} with complex amplitudes is not "
                               "supported; hqflow prepares real amplitude vectors")
        if symbolic:
            amps = _without_common_scale(amps)
            gates = amplitude_gates(amps, wires, lambda a: a.sqrt(), lambda y, x: y.arctan2(x), lambda v, c: v.guard(c))
        else:
            gates = amplitude_gates(amps, wires, np.sqrt, np.arctan2)
        here = f"{where}: amplitude encoding"
        out.extend(_Gate(name, ws, [a if symbolic else float(a) for a in angles], here) for name, ws, angles in gates)


def _names(names: Sequence[str] | None, n: int, prefix: str, what: str) -> tuple[str, ...]:
    if not isinstance(n, (int, np.integer)) or n < 0:
        raise CircuitError(f"n_{what}s must be a non-negative integer, got {n!r}")
    if names is None:
        return tuple(f"{prefix}[{i}]" for i in range(n))
    names = tuple(str(s) for s in names)
    if len(names) != n:
        raise CircuitError(f"{len(names)} {what} names given for n_{what}s={n}")
    return names


def _dyadic(rng: np.random.Generator, n: int, lo: float, hi: float) -> np.ndarray:
    """Random multiples of 1/64 in [lo, hi): sums and small multiples stay exact."""
    return rng.integers(int(lo * 64), int(hi * 64), size=n) / 64.0


def _angle_vector(gates: list[_Gate]) -> np.ndarray:
    return np.array([p for g in gates for p in g.params], dtype=float)


def _evaluate(a: Angle, values: np.ndarray, n_inputs: int) -> float:
    """The angle's value when the symbols (inputs, then weights) are ``values``."""
    if a.kind == "const":
        return a.offset
    return a.scale * values[a.index if a.kind == "input" else n_inputs + a.index] + a.offset


def _read_measurements(measurements: list, tracer: _Tracer) -> tuple[tuple[Observable, ...], bool]:
    """(observables, sampled) from a traced function's measurements."""
    obs, sampled = [], False
    everything = list(range(tracer.n_qubits))
    for m in measurements:
        if isinstance(m, qml.measurements.ExpectationMP) and m.obs is not None:
            obs.append(pennylane_observable(m.obs, tracer.n_qubits))
        elif (
            isinstance(m, (qml.measurements.ProbabilityMP, qml.measurements.SampleMP, qml.measurements.CountsMP))
            and m.obs is None
            and m.mv is None
            and list(m.wires) in ([], everything)
        ):
            sampled = True
        else:
            raise CircuitError(
                f"circuit {tracer.label!r}: measurement {m} is not supported; return qml.expval(...) of "
                "Pauli observables, or qml.probs()/qml.counts()/qml.sample() over all wires"
            )
    if obs and sampled:
        raise CircuitError(f"circuit {tracer.label!r}: mixes expectation values with probabilities or samples")
    return tuple(obs), sampled


def _coerce_observables(observables: Any, n_qubits: int) -> tuple[Observable, ...]:
    if isinstance(observables, (str, Observable, PauliTerm, qml.operation.Operator)):
        observables = [observables]
    return tuple(
        pennylane_observable(o, n_qubits) if isinstance(o, qml.operation.Operator) else Observable.coerce(o)
        for o in observables
    )


def pennylane_observable(op: qml.operation.Operator, n_qubits: int) -> Observable:
    """An hqflow ``Observable`` for a PennyLane operator that is a real Pauli sum."""
    rep = op.pauli_rep
    if rep is None:
        raise CircuitError(f"observable {op} is not a sum of Pauli products (PauliX/Y/Z, @, +, scalar *)")
    terms = []
    for word, coeff in rep.items():
        c = complex(qml.math.toarray(qml.math.unwrap(coeff)))
        if abs(c.imag) > 1e-12 * max(1.0, abs(c.real)):
            raise CircuitError(f"observable {op} has the complex coefficient {c}; observables must be Hermitian")
        for w in word:
            if not isinstance(w, (int, np.integer)) or isinstance(w, bool) or not 0 <= w < n_qubits:
                raise CircuitError(
                    f"observable {op} uses wire {w!r}; wires must be the integers 0..{n_qubits - 1}"
                )
        terms.append(PauliTerm(c.real, tuple(sorted((int(w), p) for w, p in word.items()))))
    if not terms:
        raise CircuitError(f"observable {op} is zero")
    return Observable(tuple(terms))


# ------------------------------------------------------------------ to PennyLane


def apply_template(template: CircuitTemplate, angles: Sequence[Sequence[Any]]) -> None:
    """Queue the template's gates as PennyLane ops.

    ``angles[k][j]`` is the value of angle ``j`` of op ``k``: a number, or an
    array ``[B]`` for parameter broadcasting, in any PennyLane interface.
    """
    for op, values in zip(template.ops, angles):
        _GATE_TABLE[op.name][1](*values, wires=list(op.wires))


def to_pennylane(template: CircuitTemplate) -> Callable[..., Any]:
    """A quantum function ``qfunc(inputs, weights)`` for the template.

    ``inputs`` is ``[n_inputs]`` or ``[B, n_inputs]`` (broadcast over rows) and
    ``weights`` is ``[n_weights]`` or ``[B, n_weights]``, as numpy, autograd or
    torch tensors (gradients flow through). It applies the gates and returns the
    template's measurements: one ``qml.expval`` per observable (a list when there
    are several), or ``qml.probs`` over all wires when there are none.
    """

    raw, template = template, template.lowered()

    def qfunc(inputs: Any = (), weights: Any = ()) -> Any:
        inputs, weights = _tensor(inputs), _tensor(weights)
        like = qml.math.get_interface(inputs, weights)
        if raw.derived:  # the derived inputs, in the inputs' own interface (gradients flow through)
            inputs = raw.encode(inputs, qml.math)

        def value(a: Angle) -> Any:
            if a.kind == "const":
                return a.offset if like == "numpy" else qml.math.asarray(np.float64(a.offset), like=like)
            src = inputs if a.kind == "input" else weights
            return a.scale * src[..., a.index] + a.offset

        apply_template(template, [[value(a) for a in op.angles] for op in template.ops])
        if template.phase:
            qml.GlobalPhase(-sum(value(a) for a in template.phase))
        if not template.observables:
            return qml.probs(wires=range(template.n_qubits))
        measured = [qml.expval(observable_to_pennylane(o)) for o in template.observables]
        return measured[0] if len(measured) == 1 else measured

    qfunc.__name__ = raw.name
    return qfunc


def _tensor(a: Any) -> Any:
    return a if qml.math.get_interface(a) != "numpy" else np.asarray(a, dtype=float)


def observable_to_pennylane(obs: Observable) -> qml.operation.Operator:
    """A PennyLane ``Hamiltonian`` (linear combination of Pauli products) for ``obs``."""

    def product(paulis: tuple[tuple[int, str], ...]) -> qml.operation.Operator:
        if not paulis:
            return qml.Identity(0)
        ops = [_PAULI_OPS[p](w) for w, p in paulis]
        return ops[0] if len(ops) == 1 else qml.prod(*ops)

    obs = Observable.coerce(obs)
    return qml.Hamiltonian([t.coeff for t in obs.terms], [product(t.paulis) for t in obs.terms])
