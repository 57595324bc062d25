"""Property tests for feature maps (issue 22): random functions of the inputs, as Qiskit
``ParameterExpression``s and as PennyLane quantum functions, and random ``AmplitudeEmbedding``s, over
inputs that include zeros and the edges of the functions' domains.

Wherever the circuit's values exist, hqflow's equal Qiskit's ``Statevector`` (or PennyLane's
``default.qubit``), on the reference backend and the compiled program alike; wherever their derivative
exists (central finite differences of the values are defined), parameter shift and the compiled
program's autograd give it. Everywhere else hqflow says so in one line: a row where a value does not
exist (``log(0)``, an all-zero amplitude vector) names that row, on every path.

Examples come from a fixed grid of dyadic numbers (sums and products are exact, so domain edges such as
``arcsin(0.5 + 0.5)`` are hit exactly, and Qiskit and numpy agree on which side of an edge a row lies).
Hypothesis runs derandomized, with no deadline, a few dozen examples in all.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pennylane as qml
import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from qiskit import QuantumCircuit
from qiskit.circuit import Parameter, ParameterExpression
from qiskit.quantum_info import SparsePauliOp, Statevector

from hqflow.backends import BackendError, CircuitBatch, get_backend
from hqflow.backends.compiled import compile_template
from hqflow.gradients import param_shift
from hqflow.ir import CircuitError, from_pennylane, from_qiskit

SETTINGS = settings(derandomize=True, deadline=None, database=None, max_examples=30,
                    suppress_health_check=list(HealthCheck))
GRID = (0.0, 0.0, 0.0, 1.0, -1.0, 0.5, -0.5, 0.25, 2.0, -2.0, 0.75, -1.25, 1.5)
UNARY = ("sin", "cos", "exp", "log", "sqrt", "arcsin", "arccos", "arctan")
EPS = 1e-6
REFERENCE = get_backend("reference")

# an expression tree: ("x", i), ("c", value), (function, tree), (op, tree, tree) or ("pow", tree, exponent)
_leaves = st.one_of(st.integers(0, 1).map(lambda i: ("x", i)), st.sampled_from((0.5, 2.0, -1.5)).map(lambda c: ("c", c)))
TREES = st.recursive(_leaves, lambda kids: st.one_of(
    st.tuples(st.sampled_from(UNARY), kids),
    st.tuples(st.sampled_from(("add", "mul", "sub")), kids, kids),
    st.tuples(st.just("pow"), kids, st.sampled_from((2.0, 3.0, 0.5, 1.5, -1.0)))), max_leaves=4)
ROWS = st.lists(st.tuples(st.sampled_from(GRID), st.sampled_from(GRID)), min_size=2, max_size=4)


def build(tree, leaf, function):
    """The tree with ``leaf(i)`` for inputs and ``function(name, arg)`` for functions; a function of a
    constant is left out (the tree stays a function of the inputs, and never a constant that is not a number)."""
    kind = tree[0]
    if kind == "x":
        return leaf(tree[1])
    if kind == "c":
        return tree[1]
    a = build(tree[1], leaf, function)
    if kind in UNARY:
        return function(kind, a) if uses_inputs(tree[1]) else a
    if kind == "pow":
        return a ** tree[2] if uses_inputs(tree[1]) else a
    b = build(tree[2], leaf, function)
    if not (uses_inputs(tree[1]) or uses_inputs(tree[2])):
        return a  # not 0.5 - 0.5: a zero factor would hide a function's domain (0 * log(x) is 0 for hqflow)
    return a + b if kind == "add" else a * b if kind == "mul" else a - b


def uses_inputs(tree) -> bool:
    return tree[0] == "x" or (tree[0] != "c" and any(uses_inputs(t) for t in tree[1:] if isinstance(t, tuple)))


def real_value(tree, row) -> float | None:
    """The tree as ``build`` writes it, evaluated by numpy at a row, or None where any value on the way is
    not a finite number (``arctan(1 / x)`` at 0 too: ``1 / 0`` is not a real number)."""
    ok = [True]

    def note(v):
        ok[0] = ok[0] and bool(np.isfinite(v))
        return v

    def walk(t):
        kind = t[0]
        if kind == "x":
            return row[t[1]]
        if kind == "c":
            return t[1]
        a = walk(t[1])
        if kind in UNARY:
            return note(getattr(np, kind)(a)) if uses_inputs(t[1]) else a
        if kind == "pow":
            return note(np.float64(a) ** t[2]) if uses_inputs(t[1]) else a
        b = walk(t[2])
        if not (uses_inputs(t[1]) or uses_inputs(t[2])):
            return a
        return note(a + b if kind == "add" else a * b if kind == "mul" else a - b)

    with np.errstate(all="ignore"):
        value = walk(tree)
    return float(value) if ok[0] else None


def qiskit_function(name, a):
    return a ** 0.5 if name == "sqrt" else getattr(a, name)()


def numpy_function(name, a):
    return getattr(np, name)(a)


def one_line_error(call, kind=BackendError) -> str:
    with pytest.raises(kind) as info:
        call()
    message = str(info.value)
    assert message and "\n" not in message, message
    return message


def values(template, x, w):
    return REFERENCE.submit(CircuitBatch.make(template, x, w)).result().values


def defined(template, x, w) -> bool:
    try:
        values(template, x, w)
        return True
    except BackendError:
        return False


def check_gradients(template, x, w):
    """Input gradients against central differences of the values, row by row: where those are defined and
    finite, param shift and the compiled program's autograd agree with them; where a row sits at the edge
    of a domain (a difference is undefined), the derivative is a one-line error."""
    prog = compile_template(template, dtype="complex128")
    n = template.n_inputs
    for r in range(len(x)):
        row = x[r:r + 1]
        moved = np.concatenate([row + EPS * np.eye(n), row - EPS * np.eye(n)])
        if not defined(template, moved, w):
            event("a row at the edge of a domain: no derivative")
            message = one_line_error(lambda: param_shift(template, row, w, wrt="inputs"))
            assert "for row 0" in message, message
            xt = torch.tensor(row, requires_grad=True)
            assert one_line_error(lambda: prog(xt, torch.tensor(w))) == message
            continue
        v = values(template, moved, w)
        fd = (v[:n] - v[n:]).T / (2 * EPS)  # [n_obs, n]
        cols = template.encode(moved, np)
        if not np.isfinite(fd).all() or np.abs(cols[:n] - cols[n:]).max() > 1e-3:
            continue  # differences of an angle that turns fast (exp(1 / x**2)) say little
        event("gradients checked" + (" where the chain rule breaks down" if template.singular_inputs(row).any() else ""))
        batch, post = param_shift(template, row, w, wrt="inputs")
        jac = post(REFERENCE.submit(batch).result()).input_jacobian[0]
        np.testing.assert_allclose(jac, fd, rtol=1e-4, atol=1e-5, err_msg=f"row {row}")
        xt = torch.tensor(row, requires_grad=True)
        prog(xt, torch.tensor(w)).sum().backward()
        np.testing.assert_allclose(xt.grad.numpy()[0], fd.sum(0), rtol=1e-4, atol=1e-5, err_msg=f"row {row}")


def check_rows(template, x, w, expected):
    """``expected[r]`` is the row's values, or None where they do not exist."""
    bad = [r for r, e in enumerate(expected) if e is None]
    if bad:
        event("rows without values")
        message = one_line_error(lambda: values(template, x, w))
        assert f"for row {bad[0]} " in message, message
        prog = compile_template(template)
        assert one_line_error(lambda: prog(torch.tensor(x), torch.tensor(w))) == message
    good = [r for r, e in enumerate(expected) if e is not None]
    if not good:
        return
    x = x[good]
    np.testing.assert_allclose(values(template, x, w), np.array([expected[r] for r in good]), atol=1e-9)
    prog = compile_template(template, dtype="complex128")
    np.testing.assert_allclose(prog(torch.tensor(x), torch.tensor(w)).numpy(), values(template, x, w), atol=1e-9)
    check_gradients(template, x, w)


# ------------------------------------------------------------------------------ Qiskit expressions

OBSERVABLES = ["Z0", "X1", "Y0 Z1"]
LABELS = [SparsePauliOp("IZ"), SparsePauliOp("XI"), SparsePauliOp("ZY")]  # Qiskit: qubit 0 rightmost


_SYMPY_NUMPY = {"sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
                "exp": np.exp, "log": np.log, "Abs": np.abs, "sign": np.sign}


def real_angle(expression, row) -> float | None:
    """The angle as a real function of the inputs (the expression as sympy writes it, which is what hqflow
    reads, evaluated by numpy node by node), or None where any value on the way is not a real number.
    Qiskit's own binding takes ``log`` and powers of negative numbers through complex numbers, so it is
    not the oracle of where a row exists."""
    if not isinstance(expression, ParameterExpression):
        return expression
    ok = [True]

    def walk(node):
        if node.is_Symbol:
            return np.float64(row[int(node.name[1])])
        if node.is_number:
            return np.float64(float(node))
        args = [walk(a) for a in node.args]
        if node.is_Add:
            value = sum(args[1:], args[0])
        elif node.is_Mul:
            value = math.prod(args[1:], start=args[0])
        elif node.is_Pow:
            value = args[0] ** args[1]
        else:
            value = _SYMPY_NUMPY[type(node).__name__](*args)
        ok[0] = ok[0] and bool(np.isfinite(value))
        return value

    with np.errstate(all="ignore"):
        value = walk(expression.sympify())
    return float(value) if ok[0] else None


@SETTINGS
@given(trees=st.lists(TREES, min_size=2, max_size=2), rows=ROWS, w=st.sampled_from((0.3, -1.1)))
def test_qiskit_feature_maps_match_statevector_and_finite_differences(trees, rows, w):
    x0, x1, theta = Parameter("x0"), Parameter("x1"), Parameter("w")
    a0, a1 = Parameter("a0"), Parameter("a1")  # the two angles, bound to the oracle's values

    def circuit(first, second):
        qc = QuantumCircuit(2)
        qc.h([0, 1])
        qc.rz(x0, 0)
        qc.rz(x1, 1)
        qc.ry(first, 0)
        qc.cx(0, 1)
        qc.rx(second, 1)
        qc.ry(theta, 0)
        return qc

    angles = [build(t, (x0, x1).__getitem__, qiskit_function) for t in trees]
    try:
        template = from_qiskit(circuit(*angles), inputs=[x0, x1], weights=[theta], observables=OBSERVABLES)
    except CircuitError as exc:  # an angle that is a number nowhere: (x0 - x0)**-1
        event("refused at conversion")
        assert "\n" not in str(exc) and "not a finite number" in str(exc), str(exc)
        return
    x, oracle = np.array(rows, dtype=float), circuit(a0, a1)
    expected = []
    for row in x:
        at = [real_angle(a, row) for a in angles]
        if any(a is None for a in at):
            expected.append(None)
            continue
        state = Statevector(oracle.assign_parameters({x0: row[0], x1: row[1], theta: w, a0: at[0], a1: at[1]}))
        expected.append([state.expectation_value(o).real for o in LABELS])
    check_rows(template, x, np.array([w]), expected)


# ------------------------------------------------------------------------------ PennyLane functions

DEVICE = qml.device("default.qubit")


def pennylane_values(qfunc, x, w) -> list:
    """default.qubit's values per row, or None where they are not numbers (or PennyLane refuses the row)."""
    qnode = qml.QNode(qfunc, DEVICE)
    out = []
    for row in x:
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                v = np.array(qnode(row, w), dtype=float).ravel()
        except Exception:  # PennyLane refuses a NaN state
            v = np.array([np.nan])
        out.append(v if np.isfinite(v).all() else None)
    return out


@SETTINGS
@given(trees=st.lists(TREES, min_size=2, max_size=2), rows=ROWS, w=st.sampled_from((0.3, -1.1)))
def test_pennylane_functions_of_inputs_match_default_qubit_and_finite_differences(trees, rows, w):
    def qfunc(inputs, weights):
        angles = [build(t, inputs.__getitem__, numpy_function) for t in trees]
        qml.AngleEmbedding(inputs, wires=[0, 1], rotation="Y")
        qml.RZ(angles[0], wires=0)
        qml.CNOT([0, 1])
        qml.RX(angles[1], wires=1)
        qml.RY(weights[0], wires=0)
        return qml.expval(qml.Z(0)), qml.expval(qml.X(1)), qml.expval(qml.Y(0) @ qml.Z(1))

    try:
        template = from_pennylane(qfunc, 2, n_inputs=2, n_weights=1)
    except CircuitError as exc:  # a function of the inputs that is a number at none of the sample inputs
        event("refused at conversion")
        assert "\n" not in str(exc) and "not a finite number at the sample inputs" in str(exc), str(exc)
        return
    x, weights = np.array(rows, dtype=float), np.array([w])
    expected = pennylane_values(qfunc, x, weights)
    for r, row in enumerate(x):  # where a value on the way is not a number, numpy's angle is no real function's
        if any(real_value(t, row) is None for t in trees):
            expected[r] = None
    check_rows(template, x, weights, expected)


# ------------------------------------------------------------------------------ amplitude embeddings

AMPLITUDES = st.sampled_from((0.0, 0.0, 0.0, 1.0, -1.0, 0.5, -2.0, 0.25, 3.0))


@st.composite
def amplitude_cases(draw):
    n_qubits = draw(st.integers(1, 3))
    pad = draw(st.sampled_from((None, 0.0, 0.5)))
    n_features = 2**n_qubits if pad is None else draw(st.integers(2 ** (n_qubits - 1) + 1, 2**n_qubits))
    rows = draw(st.lists(st.lists(AMPLITUDES, min_size=n_features, max_size=n_features), min_size=2, max_size=3))
    return n_qubits, pad, np.array(rows, dtype=float), draw(st.sampled_from((0.3, -1.1)))


@SETTINGS
@given(case=amplitude_cases())
def test_amplitude_embeddings_match_default_qubit_and_finite_differences(case):
    n_qubits, pad, x, w = case

    def qfunc(inputs, weights):
        qml.AmplitudeEmbedding(inputs, wires=range(n_qubits), normalize=True, pad_with=pad)
        qml.RY(weights[0], wires=0)
        for q in range(n_qubits - 1):
            qml.CNOT([q, q + 1])
        return qml.expval(qml.Z(0)), qml.expval(qml.X(n_qubits - 1))

    template = from_pennylane(qfunc, n_qubits, n_inputs=x.shape[1], n_weights=1)
    weights = np.array([w])
    check_rows(template, x, weights, pennylane_values(qfunc, x, weights))
