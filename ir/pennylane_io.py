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
recursively) until only gates of ``hqflow.ir.gates.GATES`` remain; ``GlobalPhase``
is dropped (it changes no expectation value or probability).

Each gate angle must be affine in at most one input or weight. The conversion
finds out which by probing: it traces once at a base point, once more per symbol
with only that symbol moved (finite differences of an affine map are exact), and
once at an unrelated point to confirm that ``scale * symbol + offset`` predicts
every angle there. Probe points are fixed dyadic numbers, so conversion is
deterministic and simple expressions (``x``, ``2 * x + 0.5``, ``w / 8``) come out
exactly. A gate sequence that changes with the values (control flow, values used
as bits) is rejected.

``to_pennylane`` goes the other way; ``apply_template`` is its core, shared with
the ``pennylane:<device>`` backend.

PennyLane records operations on a process-wide queue, so tracing in two threads
at once can mix their operations. Everything in hqflow that traces PennyLane code
holds ``PENNYLANE_LOCK``.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pennylane as qml

from .circuit import Angle, CircuitError, CircuitTemplate, Observable, Op, PauliTerm
from .gates import GATES

PENNYLANE_LOCK = threading.RLock()


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
    label = name or getattr(qfunc, "__name__", "circuit")
    input_names = _names(input_names, n_inputs, "x", "input")
    weight_names = _names(weight_names, n_weights, "w", "weight")
    tracer = _Tracer(qfunc, int(n_qubits), int(n_inputs), label)
    gates, angles, (measured, measured_elsewhere) = _fit_angles(tracer, input_names + weight_names)

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
        ops.append(Op(gate.name, gate.wires, tuple(next(it) for _ in gate.params)))
    return CircuitTemplate(
        int(n_qubits), tuple(ops), input_names, weight_names, traced_obs, shots, label
    ).check()


def _fit_angles(tracer: _Tracer, symbols: tuple[str, ...]) -> tuple[list[_Gate], list[Angle], tuple[list, list]]:
    """Trace at probe points and fit every gate angle as ``scale * symbol + offset``.

    Returns the gates, their angles (flattened, in gate order) and the measurements
    of the base and check traces.
    """
    label, n_inputs = tracer.label, tracer.n_inputs
    rng = np.random.default_rng(7)
    base = _dyadic(rng, len(symbols), 0.25, 1.25)
    steps = _dyadic(rng, len(symbols), 0.5, 1.0)
    check = _dyadic(rng, len(symbols), -1.25, -0.25)

    gates, measurements = tracer.trace(base, first=True)
    angles0 = _angle_vector(gates)
    slopes = np.zeros((len(symbols), angles0.size))
    for k in range(len(symbols)):
        probe = base.copy()
        probe[k] += steps[k]
        moved, _ = tracer.trace(probe, same_as=gates, moved=symbols[k])
        slopes[k] = (_angle_vector(moved) - angles0) / steps[k]
    depends = np.abs(slopes) * steps[:, None] > 1e-10 * (1.0 + np.abs(angles0))

    flat = [(g, j) for g in gates for j in range(len(g.params))]
    angles: list[Angle] = []
    for i, (gate, j) in enumerate(flat):
        uses = np.flatnonzero(depends[:, i])
        if len(uses) > 1:
            raise CircuitError(
                f"circuit {label!r}, {gate.where}: angle {j} depends on {', '.join(symbols[k] for k in uses)}; "
                "an angle may depend on at most one input or weight"
            )
        if len(uses) == 0:
            angles.append(Angle.const(angles0[i]))
            continue
        k = int(uses[0])
        scale = slopes[k, i]
        offset = angles0[i] - scale * base[k]
        angles.append(
            Angle.input(k, scale, offset) if k < n_inputs else Angle.weight(k - n_inputs, scale, offset)
        )

    moved, moved_measurements = tracer.trace(check, same_as=gates, moved="the inputs and weights")
    predicted = np.array([_evaluate(a, check, n_inputs) for a in angles])
    actual = _angle_vector(moved)
    bad = np.flatnonzero(np.abs(predicted - actual) > 1e-8 * (1.0 + np.abs(actual)))
    if bad.size:
        gate, j = flat[int(bad[0])]
        raise CircuitError(
            f"circuit {label!r}, {gate.where}: angle {j} is not affine in one input or weight "
            "(such as sin(x) or x * w); template angles must have the form a * symbol + b"
        )
    return gates, angles, (measurements, moved_measurements)


class _Gate:
    """One traced hqflow gate with its numeric angles and where it came from."""

    def __init__(self, name: str, wires: tuple[int, ...], params: list[float], where: str):
        self.name, self.wires, self.params, self.where = name, wires, params, where

    def key(self) -> tuple:
        return self.name, self.wires, len(self.params)


class _Tracer:
    """Runs the user's function on given symbol values and lowers it to hqflow gates."""

    def __init__(self, qfunc: Callable, n_qubits: int, n_inputs: int, label: str):
        self.qfunc, self.n_qubits, self.n_inputs, self.label = qfunc, n_qubits, n_inputs, label

    def trace(
        self, values: np.ndarray, first: bool = False, same_as: list[_Gate] | None = None, moved: str = ""
    ) -> tuple[list[_Gate], list]:
        x, w = values[: self.n_inputs].copy(), values[self.n_inputs :].copy()
        with PENNYLANE_LOCK:
            tape = qml.tape.make_qscript(self.qfunc)(x, w)
            if first:
                for item in list(tape.operations) + list(tape.measurements):
                    self.check_wires(item.wires, getattr(item, "name", type(item).__name__))
            with qml.QueuingManager.stop_recording():
                gates = [
                    g
                    for k, op in enumerate(tape.operations)
                    for g in self._lower(op, f"operation {k} ({op.name})", top=True)
                ]
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

    def _lower(self, op: qml.operation.Operator, where: str, top: bool = False, depth: int = 0) -> list[_Gate]:
        if isinstance(op, qml.ops.MidMeasure) or isinstance(op, qml.ops.Conditional):
            raise CircuitError(f"circuit {self.label!r}: {where}: mid-circuit measurements are not supported")
        if op.name in _DROPPED:
            return []
        hq = _FROM_PENNYLANE.get(op.name)
        if hq is not None:
            here = where if top else f"gate {op.name} on wires {list(op.wires)} (from {where})"
            if hq == "id":
                return [_Gate("id", (int(w),), [], here) for w in op.wires]
            params = []
            for p in op.parameters:
                if np.ndim(p) != 0 or np.iscomplexobj(p):
                    raise CircuitError(f"{here}: angles must be real scalars, got {p!r}")
                params.append(float(p))
            return [_Gate(hq, tuple(int(w) for w in op.wires), params, here)]
        if not op.has_decomposition or depth >= _MAX_DEPTH:
            raise CircuitError(
                f"circuit {self.label!r}: {where}: {op.name} is not supported and has no decomposition into "
                f"hqflow gates ({', '.join(sorted(GATES))})"
            )
        return [g for sub in op.decomposition() for g in self._lower(sub, where, depth=depth + 1)]


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

    def qfunc(inputs: Any = (), weights: Any = ()) -> Any:
        inputs, weights = _tensor(inputs), _tensor(weights)
        like = qml.math.get_interface(inputs, weights)

        def value(a: Angle) -> Any:
            if a.kind == "const":
                return a.offset if like == "numpy" else qml.math.asarray(np.float64(a.offset), like=like)
            src = inputs if a.kind == "input" else weights
            return a.scale * src[..., a.index] + a.offset

        apply_template(template, [[value(a) for a in op.angles] for op in template.ops])
        if not template.observables:
            return qml.probs(wires=range(template.n_qubits))
        measured = [qml.expval(observable_to_pennylane(o)) for o in template.observables]
        return measured[0] if len(measured) == 1 else measured

    qfunc.__name__ = template.name
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
