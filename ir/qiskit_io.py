"""The Qiskit edge: ``QuantumCircuit`` <-> ``CircuitTemplate``, observables and QPY.

    qc = QuantumCircuit(2); x = Parameter("x"); w = ParameterVector("w", 2)
    qc.ry(2 * x + 0.5, 0); qc.cx(0, 1); qc.rz(w[0], 0); qc.rx(w[1], 1)
    template = from_qiskit(qc, inputs=[x], weights=[w], observables=["Z0 Z1"])

Qiskit qubit ``i`` becomes hqflow wire ``i``; ops keep their wire roles
(``cx(control, target)`` is ``Op("cx", (control, target))``). Gates outside
``hqflow.ir.gates.GATES`` are decomposed with Qiskit's transpiler, barriers and
final measurements (``measure_all()`` included) are dropped: a template's
observables say what is measured, and a template without observables is sampled
on every wire. The global phase (``qc.global_phase``, ``GlobalPhaseGate``) changes
no expectation value or probability: a parameter that appears only there need not
be listed, and one that is listed (as Qiskit's Estimator binds it) is the template's
own, with values unchanged and a gradient of exactly 0. ``CircuitTemplate.phase``
keeps the phase's terms in the listed parameters (``a * t`` where it is affine in
``t``, else a term ``t``), so ``to_qiskit`` and QPY give them back; its constant
part is dropped.
``PauliEvolutionGate`` is decomposed by Qiskit's transpiler: terms that do not
commute become one first-order Trotter step, as the transpiler's default
synthesis makes them, which differs from the exact exponential ``Statevector``
uses; synthesize the evolution yourself (``LieTrotter(reps=...)``, ``SuzukiTrotter``)
for a finer one.

An angle affine in one parameter (``a * p + b``) stays a plain angle. Any other
function of the *inputs* (products such as ``ZZFeatureMap``'s ``2 (π - x0)(π - x1)``,
sums of several inputs, ``sin``/``cos``/``exp``/powers, ...) becomes a derived
input (``CircuitTemplate.derived``), computed classically per row. A weight must
enter its angles affinely and alone: ``θ * x`` or ``sin(θ)`` is an error.

A derived input is the real function of the expression as sympy writes it
(``value.sympify()``; the conversion is checked against Qiskit's value at a probe
point inside the expression's domain, or symbolically where no probe point is). A
row where it is not a real number (``log(x - 1)`` at ``x = 1``) is refused in one
line. Qiskit's own binding differs at some such rows: it takes ``log`` and powers
of negative numbers through complex numbers, and sympy simplifies ``sin(asin(x))``
to ``x``.
"""
from __future__ import annotations

import base64
import io
import struct
from collections.abc import Iterable, Sequence

import numpy as np
from qiskit import QuantumCircuit, qpy, transpile
from qiskit.circuit import (
    Barrier,
    ControlFlowOp,
    Delay,
    Gate,
    Instruction,
    Measure,
    Parameter,
    ParameterExpression,
    ParameterVector,
    Reset,
)
from qiskit.circuit.library import GlobalPhaseGate, get_standard_gate_name_mapping
from qiskit.circuit.parametertable import ParameterView
from qiskit.quantum_info import Pauli, SparsePauliOp

from . import expr as ex
from .circuit import Angle, CircuitError, CircuitTemplate, Observable, Op, PauliTerm
from .gates import GATES

# hqflow gate name -> the Qiskit gate class of the same name and definition.
_QISKIT_GATES = {name: type(gate) for name, gate in get_standard_gate_name_mapping().items() if name in GATES}
_IMAG_TOL = 1e-12


def from_qiskit(
    qc: QuantumCircuit,
    inputs: Iterable = (),
    weights: Iterable = (),
    observables: Iterable = (),
    shots: int | None = None,
    name: str | None = None,
) -> CircuitTemplate:
    """Normalize a Qiskit circuit into a checked ``CircuitTemplate``.

    ``inputs`` and ``weights`` list the circuit's parameters (``Parameter``,
    ``ParameterVector``, ``qc.parameters`` or name, in any mixture); every
    parameter must be in exactly one of them. ``observables`` are hqflow observable-likes
    (``"Z0 Z1"``, ``[(coeff, "Z0 Z1"), ...]``) or ``SparsePauliOp``/``Pauli``.
    """
    if not isinstance(qc, QuantumCircuit):
        raise CircuitError(f"from_qiskit expects a qiskit QuantumCircuit, got {type(qc).__name__}")
    name = qc.name if name is None else name
    input_names, weight_names = _names(inputs, "inputs"), _names(weights, "weights")
    _check_parameters(qc, input_names, weight_names, name, _phase_only(qc))
    symbols = {n: ("input", i) for i, n in enumerate(input_names)}
    symbols.update({n: ("weight", j) for j, n in enumerate(weight_names)})
    unitary = _unitary_part(qc, symbols)
    derived: list[ex.Expr] = []
    ops = tuple(_op(unitary, inst, symbols, derived) for inst in _decomposed(unitary).data)
    return CircuitTemplate(
        qc.num_qubits,
        ops,
        tuple(input_names),
        tuple(weight_names),
        tuple(_observable(o) for o in _as_list(observables)),
        shots,
        name,
        tuple(derived),
        _phase(qc, symbols),
    ).check()


def to_qiskit(template: CircuitTemplate) -> QuantumCircuit:
    """A ``QuantumCircuit`` whose ``Parameter``s are named after the template's inputs and weights.

    Derived inputs become the ``ParameterExpression``s they stand for (``arctan2``, which Qiskit's
    expressions lack, is a ``CircuitError``: ``to_qiskit(template.lowered())`` has a parameter per
    column instead)."""
    params = {
        "input": [Parameter(n) for n in template.input_names],
        "weight": [Parameter(n) for n in template.weight_names],
    }
    params["input"] += [_qiskit_expr(e, params["input"], template) for e in template.derived]
    qc = QuantumCircuit(template.n_qubits, name=template.name)
    for op in template.ops:
        angles = [_qiskit_angle(a, params) for a in op.angles]
        qc.append(_QISKIT_GATES[op.name](*angles), list(op.wires))
    if template.phase:
        qc.global_phase = sum(_qiskit_angle(a, params) for a in template.phase)
    return qc


def _qiskit_expr(e: ex.Expr, inputs: list, template: CircuitTemplate):
    if e.op == "const":
        return e.value
    if e.op == "input":
        return inputs[e.index]
    args = [_qiskit_expr(a, inputs, template) for a in e.args]
    if e.op == "add":
        return sum(args[1:], args[0])
    if e.op == "mul":
        out = args[0]
        for a in args[1:]:
            out = out * a
        return out
    if e.op == "pow":
        return args[0] ** args[1]
    if e.op == "sqrt":
        return args[0] ** 0.5
    method = {"arcsin": "arcsin", "arccos": "arccos", "arctan": "arctan"}.get(e.op, e.op)
    if e.op == "arctan2" or not hasattr(args[0], method):
        raise CircuitError(f"circuit {template.name!r}: {e.op} in derived input {e.format(template.input_names)} "
                           "has no Qiskit ParameterExpression; use to_qiskit(template.lowered()), which takes "
                           "the derived inputs as parameters")
    return getattr(args[0], method)()


def parameters_of(qc: QuantumCircuit, template: CircuitTemplate) -> tuple[list[Parameter], list[Parameter]]:
    """The circuit's input and weight ``Parameter``s, each in template order (for binding arrays)."""
    by_name = {p.name: p for p in qc.parameters}
    missing = [n for n in template.input_names + template.weight_names if n not in by_name]
    if missing:
        raise CircuitError(f"circuit {qc.name!r} has no parameter(s) {missing} of template {template.name!r}")
    return [by_name[n] for n in template.input_names], [by_name[n] for n in template.weight_names]


def observable_to_sparse_pauli(obs: Observable, n_qubits: int) -> SparsePauliOp:
    """The observable as a ``SparsePauliOp`` on ``n_qubits`` qubits."""
    terms = [("".join(p for _, p in t.paulis), list(t.wires), t.coeff) for t in obs.terms]
    return SparsePauliOp.from_sparse_list(terms, num_qubits=n_qubits)


def template_to_qpy(template: CircuitTemplate) -> str:
    """Base64 text of the QPY bytes of ``to_qiskit(template)``."""
    buf = io.BytesIO()
    qpy.dump(to_qiskit(template), buf)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def template_from_qpy(
    data: str,
    input_names: Sequence[str],
    weight_names: Sequence[str],
    observables: Iterable = (),
    shots: int | None = None,
    name: str = "circuit",
) -> CircuitTemplate:
    """Inverse of ``template_to_qpy`` (observables and shots travel outside the QPY)."""
    if len(data) > _MAX_QPY_CHARS:
        raise CircuitError(f"QPY data for circuit {name!r} is {len(data):,} characters, over {_MAX_QPY_CHARS:,}")
    try:
        raw = base64.b64decode(data.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise CircuitError(f"QPY data for circuit {name!r} is not base64") from None
    _check_qpy_header(raw, name)
    try:
        circuits = qpy.load(io.BytesIO(raw))
    except Exception as exc:  # qpy raises many kinds of errors on bad bytes
        raise CircuitError(f"cannot decode QPY data for circuit {name!r}: {exc}") from None
    if len(circuits) != 1:
        raise CircuitError(f"QPY data for circuit {name!r} holds {len(circuits)} circuits, expected 1")
    return from_qiskit(circuits[0], input_names, weight_names, observables, shots, name)


_MAX_QPY_CHARS = 8 * 2**20
_QPY_FILE_HEADER = struct.Struct("!6sBBBBQc")  # preface, qpy version, qiskit version, programs, encoding
_QPY_CIRCUIT_HEADER = struct.Struct("!HcHIIQIQI")  # name, phase type and size, qubits, clbits, metadata,
#                                                    registers, instructions, vars (QPY >= 12)


def _check_qpy_header(raw: bytes, name: str) -> None:
    """Refuse QPY whose header declares more than its bytes can hold, before Qiskit allocates for it
    (one changed byte in a size field made ``qpy.load`` take 20 s and 4 GB)."""
    def bad(why: str) -> CircuitError:
        return CircuitError(f"QPY data for circuit {name!r} is damaged or unsupported: {why}")

    if len(raw) < _QPY_FILE_HEADER.size + 1 + _QPY_CIRCUIT_HEADER.size:
        raise bad("too short")
    preface, version, *_, programs, _encoding = _QPY_FILE_HEADER.unpack_from(raw)
    if preface != b"QISKIT":
        raise bad("not QPY")
    if version < 12:
        raise bad(f"QPY version {version} (hqflow reads version 12 and later)")
    if programs != 1:
        raise bad(f"it declares {programs} circuits, expected 1")
    offset = _QPY_FILE_HEADER.size + 1  # the program's type key
    if version >= 16:  # a table of the circuits' offsets comes first
        (start,) = struct.unpack_from("!Q", raw, offset)
        if start != offset + 8:
            raise bad("its circuit table points outside the circuit")
        offset = start
    if len(raw) < offset + _QPY_CIRCUIT_HEADER.size:
        raise bad("too short")
    (name_size, _, phase_size, qubits, clbits, metadata, registers, instructions,
     variables) = _QPY_CIRCUIT_HEADER.unpack_from(raw, offset)
    left = len(raw) - offset - _QPY_CIRCUIT_HEADER.size
    if name_size + phase_size + metadata > left or max(registers, instructions, variables) > left:
        raise bad("its header declares more data than it holds")
    if qubits > 64 or clbits > 64:
        raise bad(f"{qubits} qubits and {clbits} clbits declared")


# --- parameters -------------------------------------------------------------


def _names(items: Iterable, what: str) -> list[str]:
    """Parameter names, expanding ``ParameterVector``s (and ``qc.parameters`` views) in order."""
    if isinstance(items, (str, Parameter, ParameterVector)):
        items = [items]
    names: list[str] = []
    for item in items:
        if isinstance(item, (ParameterVector, ParameterView)):
            names += [p.name for p in item]
        elif isinstance(item, Parameter):
            names.append(item.name)
        elif isinstance(item, str):
            names.append(item)
        else:
            kind = type(item).__name__
            raise CircuitError(f"{what} must be qiskit Parameters, ParameterVectors or names; got {item!r} ({kind})")
    return names


def _phase_only(qc: QuantumCircuit) -> set[str]:
    """Names of the parameters that appear in the global phase (or a ``GlobalPhaseGate``) and in no gate."""
    phase = qc.global_phase
    in_phase = {p.name for p in phase.parameters} if isinstance(phase, ParameterExpression) else set()
    in_gates = set()
    for inst in qc.data:
        names = {p.name for v in getattr(inst.operation, "params", ()) if isinstance(v, ParameterExpression)
                 for p in v.parameters}
        if isinstance(inst.operation, GlobalPhaseGate):
            in_phase |= names
        else:
            in_gates |= names
    return in_phase - in_gates


def _phase(qc: QuantumCircuit, symbols: dict) -> tuple[Angle, ...]:
    """The terms of the global phase (``qc.global_phase`` and ``GlobalPhaseGate``s) in the listed parameters."""
    parts = [qc.global_phase] + [i.operation.params[0] for i in qc.data if isinstance(i.operation, GlobalPhaseGate)]
    terms = []
    for value in parts:
        for p in sorted(value.parameters if isinstance(value, ParameterExpression) else (), key=lambda p: p.name):
            if p.name in symbols:
                slope = value.gradient(p)  # a number where the phase is affine in p
                scale = 1.0 if isinstance(slope, ParameterExpression) else float(np.real(slope))
                terms.append(Angle(*symbols[p.name], scale, 0.0))
    return tuple(terms)


def _check_parameters(qc: QuantumCircuit, input_names: list[str], weight_names: list[str], name: str,
                      phase_only: set[str] = frozenset()) -> None:
    both = sorted(set(input_names) & set(weight_names))
    if both:
        raise CircuitError(f"circuit {name!r}: parameter(s) {both} listed as both inputs and weights")
    for names, what in ((input_names, "inputs"), (weight_names, "weights")):
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise CircuitError(f"circuit {name!r}: parameter(s) {twice} listed twice in {what}")
    in_circuit = [p.name for p in qc.parameters]
    unbound = [n for n in in_circuit if n not in input_names + weight_names and n not in phase_only]
    if unbound:
        raise CircuitError(
            f"circuit {name!r}: unbound parameter(s) {unbound}: list each one in inputs or weights"
        )
    extra = [n for n in input_names + weight_names if n not in in_circuit]
    if extra:
        raise CircuitError(f"circuit {name!r}: extra parameter(s) {extra} listed but not in the circuit")


def _angle(value, gate: str, wires: list[int], symbols: dict, derived: list[ex.Expr]) -> Angle:
    """``value`` (number or ``ParameterExpression``) as an ``Angle``, or ``CircuitError``.

    A function of the inputs other than ``a * x + b`` is appended to ``derived`` (once per distinct
    expression) and the angle reads its column."""
    where = f"gate {gate!r} on qubit(s) {wires}"
    if not isinstance(value, ParameterExpression):
        return Angle.const(_real(value, where))
    params = list(value.parameters)
    if not params:
        return Angle.const(_real(value.numeric(), where))
    if len(params) == 1:
        (p,) = params
        scale = value.gradient(p)
        try:  # the offset: the value at 0, where the expression may be undefined ((x - x)**-1)
            offset = None if isinstance(scale, ParameterExpression) else complex(value.bind({p: 0}).numeric())
        except (ArithmeticError, RuntimeError, ValueError, TypeError):
            offset = None
        if offset is not None and np.isfinite(offset):
            kind, index = symbols[p.name]
            return Angle(kind, index, _real(scale, where), _real(offset, where))
    e = _expression(value, symbols, where)
    if e.is_const:  # x - x, say
        return Angle.const(e.value)
    kinds = {kind for kind, _ in e.symbols()}
    if "weight" in kinds:
        names = sorted(p.name for p in params)
        if "input" in kinds:
            raise CircuitError(
                f"{where}: angle {value} mixes inputs and weights ({', '.join(names)}); a template angle is a "
                "function of the inputs or affine in one weight, not both: rotate by the input part and the "
                "weight part in two gates, or compute the product classically (e.g. in a torch layer) and "
                "pass it in as an input")
        raise CircuitError(f"{where}: angle {value} is not affine in weight(s) {', '.join(names)}; a weight must "
                           "enter as a*w + b (functions of the inputs are fine: they become derived inputs)")
    if e not in derived:
        derived.append(e)
    n_inputs = sum(kind == "input" for kind, _ in symbols.values())
    return Angle.input(n_inputs + derived.index(e))


_SYMPY_FUNCTIONS = {"sin": "sin", "cos": "cos", "tan": "tan", "asin": "arcsin", "acos": "arccos",
                    "atan": "arctan", "exp": "exp", "log": "log", "Abs": "abs", "sign": "sign", "atan2": "arctan2"}


def _expression(value: ParameterExpression, symbols: dict, where: str) -> ex.Expr:
    """The angle as an ``Expr`` over the template's symbols, checked against Qiskit's own value."""
    import sympy

    def convert(s) -> ex.Expr:
        if s.is_Symbol:
            kind, index = symbols[s.name]
            return ex.Expr(kind, index=index)
        if s.is_number:
            number = _real(complex(s), where)
            if not np.isfinite(number):
                raise CircuitError(f"{where}: angle {value} has the constant {s}, which is not a finite number")
            return ex.const(number)
        args = [convert(a) for a in s.args]
        if s.is_Add:
            return ex.add(*args)
        if s.is_Mul:
            return ex.mul(*args)
        if s.is_Pow:
            return ex.power(*args)
        name = type(s).__name__
        if name == "conjugate":  # parameters are real
            return args[0]
        if name not in _SYMPY_FUNCTIONS:
            raise CircuitError(f"{where}: angle {value} uses {name}, which hqflow cannot compute; supported: "
                               "+, *, powers, " + ", ".join(sorted(_SYMPY_FUNCTIONS)))
        return ex.apply(_SYMPY_FUNCTIONS[name], *args)

    try:
        e = convert(value.sympify())
    except (ex.ExprError, TypeError, ValueError, sympy.SympifyError) as exc:
        if isinstance(exc, CircuitError):
            raise
        raise CircuitError(f"{where}: cannot read angle {value}: {exc}") from None
    _check_expression(value, e, symbols, where)
    return e


def _probe_points(n: int) -> list[np.ndarray]:
    """Fixed points at which a converted angle is compared with Qiskit's: the first that lies inside the
    expression's domain serves (``log(x - 1)`` needs ``x > 1``, ``arcsin(x + 1)`` needs ``x`` in [-2, 0])."""
    k = np.arange(n)
    points = [sign * (lo + step * k) for lo, step in ((0.3, 0.17), (0.05, 0.03), (1.3, 0.17), (2.7, 0.31),
                                                      (10.3, 1.7), (100.3, 17.0)) for sign in (1.0, -1.0)]
    rng = np.random.default_rng(22)
    return points + [rng.uniform(-3.0, 3.0, n) for _ in range(8)]


def _check_expression(value: ParameterExpression, e: ex.Expr, symbols: dict, where: str) -> None:
    """``e`` gives Qiskit's value of the angle (guards the conversion itself): at the first probe point
    inside the expression's domain, or, where none is, symbolically."""
    params = sorted(value.parameters, key=lambda p: p.name)
    n = max((index for kind, index in symbols.values()), default=-1) + 1
    for point in _probe_points(len(params)):
        x, w = np.zeros((1, n)), np.zeros((1, n))
        for p, v in zip(params, point):
            kind, index = symbols[p.name]
            (x if kind == "input" else w)[0, index] = v
        with np.errstate(all="ignore"):
            got = float(np.reshape(ex.evaluate(e, x, np, w), -1)[0])
        if not np.isfinite(got):
            continue  # outside the domain: another point
        try:
            expected = complex(value.bind(dict(zip(params, map(float, point)))).numeric())
        except Exception:  # Qiskit refuses the point (NaN, a complex intermediate): another point
            continue
        if abs(expected.imag) <= 1e-9 * (1.0 + abs(expected)) and np.isclose(got, expected.real, rtol=1e-9, atol=1e-9):
            return
        raise CircuitError(f"{where}: cannot convert angle {value} (hqflow reads {e}, which gives {got} where "
                           f"Qiskit gives {expected.real if not expected.imag else expected})")
    if not _same_symbolically(value, e, symbols):
        raise CircuitError(f"{where}: cannot convert angle {value} (hqflow reads {e}, and no probe point lies "
                           "inside the domain of both to compare them)")


def _same_symbolically(value: ParameterExpression, e: ex.Expr, symbols: dict) -> bool:
    """Whether ``e``, written back as a sympy expression, equals Qiskit's: both evaluated in complex numbers
    (where a real value is undefined, the complex one still compares the formulas) at the probe points."""
    import sympy

    names = {(kind, index): name for name, (kind, index) in symbols.items()}
    functions = {ours: getattr(sympy, theirs) for theirs, ours in _SYMPY_FUNCTIONS.items()}
    functions["sqrt"] = sympy.sqrt

    def back(node: ex.Expr):
        if node.op == "const":
            return sympy.Float(node.value)
        if node.op in ("input", "weight"):
            return sympy.Symbol(names[(node.op, node.index)])
        args = [back(a) for a in node.args]
        if node.op == "add":
            return sympy.Add(*args)
        if node.op == "mul":
            return sympy.Mul(*args)
        if node.op == "pow":
            return sympy.Pow(*args)
        return functions[node.op](*args)

    try:
        theirs = value.sympify()
        ours = back(e).subs({sympy.Symbol(s.name): s for s in theirs.free_symbols})
        free = sorted(theirs.free_symbols, key=lambda s: s.name)
        for point in _probe_points(len(free))[:3]:
            at = dict(zip(free, map(float, point)))
            a, b = complex(theirs.subs(at).evalf()), complex(ours.subs(at).evalf())
            if not abs(a - b) <= 1e-9 * (1.0 + abs(a)):
                return False
        return True
    except Exception:  # sympy could not evaluate them
        return False


def _real(value, where: str) -> float:
    z = complex(value)
    if abs(z.imag) > _IMAG_TOL * max(1.0, abs(z)):
        raise CircuitError(f"{where}: complex angle {value}")
    return z.real + 0.0  # + 0.0 turns -0.0 into 0.0


def _qiskit_angle(a: Angle, params: dict):
    if a.kind == "const":
        return a.offset
    p = params[a.kind][a.index]
    return p if (a.scale, a.offset) == (1.0, 0.0) else a.scale * p + a.offset


# --- circuit body -----------------------------------------------------------


def _unitary_part(qc: QuantumCircuit, symbols: dict) -> QuantumCircuit:
    """The gates of ``qc`` without barriers, delays and final measurements.

    Rejects mid-circuit measurements, resets, classical control flow, other
    non-unitary instructions and non-affine angles (naming the original gate).
    """
    out = QuantumCircuit(qc.num_qubits, name=qc.name)
    measured: set[int] = set()
    for inst in qc.data:
        op, wires = inst.operation, [qc.find_bit(q).index for q in inst.qubits]
        if isinstance(op, (Barrier, Delay, GlobalPhaseGate)):
            continue
        if isinstance(op, Measure):
            measured.update(wires)
            continue
        late = sorted(measured.intersection(wires))
        if late:
            raise CircuitError(
                f"circuit {qc.name!r}: mid-circuit measurement on qubit(s) {late} (followed by {op.name!r})"
            )
        if isinstance(op, Reset):
            raise CircuitError(f"circuit {qc.name!r}: reset on qubit(s) {wires} is not supported")
        if isinstance(op, ControlFlowOp):
            raise CircuitError(f"circuit {qc.name!r}: classical control flow ({op.name!r}) is not supported")
        if isinstance(op, Instruction) and not isinstance(op, Gate):
            raise CircuitError(f"circuit {qc.name!r}: non-unitary instruction {op.name!r} is not supported")
        for value in getattr(op, "params", ()):
            if isinstance(value, ParameterExpression):
                _angle(value, op.name, wires, symbols, [])
        out.append(op, wires)
    return out


def _decomposed(qc: QuantumCircuit) -> QuantumCircuit:
    """``qc`` rewritten into hqflow's gate set (unchanged when it already is)."""
    if all(inst.operation.name in GATES for inst in qc.data):
        return qc
    try:
        return transpile(qc, basis_gates=list(GATES), optimization_level=0, seed_transpiler=0)
    except Exception as exc:  # the transpiler's errors have no common base class
        raise CircuitError(f"circuit {qc.name!r}: cannot decompose into hqflow gates: {exc}") from None


def _op(qc: QuantumCircuit, inst, symbols: dict, derived: list[ex.Expr]) -> Op:
    wires = [qc.find_bit(q).index for q in inst.qubits]
    name = inst.operation.name
    angles = tuple(_angle(v, name, wires, symbols, derived) for v in inst.operation.params)
    return Op(name, tuple(wires), angles)


# --- observables ------------------------------------------------------------


def _as_list(observables) -> list:
    single = (str, Observable, PauliTerm, SparsePauliOp, Pauli)
    return [observables] if isinstance(observables, single) else list(observables)


def _observable(obs) -> Observable:
    if isinstance(obs, Pauli):
        obs = SparsePauliOp(obs)
    if isinstance(obs, SparsePauliOp):
        return _from_sparse_pauli(obs)
    if type(obs).__module__.startswith("qiskit"):
        raise CircuitError(
            f"unsupported observable type {type(obs).__name__}: give a SparsePauliOp, 'Z0 Z1' "
            "or [(coeff, 'Z0 Z1'), ...]"
        )
    return Observable.coerce(obs)


def _from_sparse_pauli(op: SparsePauliOp) -> Observable:
    terms = []
    for paulis, qubits, coeff in op.to_sparse_list():
        try:
            z = complex(coeff)
        except TypeError:
            raise CircuitError(f"SparsePauliOp coefficient {coeff} is not a number") from None
        if abs(z.imag) > _IMAG_TOL * max(1.0, abs(z)):
            raise CircuitError(f"SparsePauliOp term {paulis} on qubits {qubits} has complex coefficient {z}")
        found = sorted((int(q), p) for p, q in zip(paulis, qubits) if p != "I")
        terms.append(PauliTerm(z.real, tuple(found)))
    return Observable(tuple(terms))
