"""Derived inputs: feature maps whose angles are functions of several inputs, against Statevector and
default.qubit, through every backend, gradients by the chain rule, serialization and the Expr itself."""
import json
import math
import re

import numpy as np
import pennylane as qml
import pytest
import torch
from qiskit.circuit import Parameter, ParameterVector
from qiskit.circuit.library import pauli_feature_map, real_amplitudes, zz_feature_map
from qiskit.quantum_info import SparsePauliOp, Statevector

import hqflow as hq
from hqflow.backends import BackendError, CircuitBatch, get_backend
from hqflow.backends.compiled import compile_template
from hqflow.gradients import param_shift
from hqflow.ir import CircuitCall, CircuitError, Graph, from_pennylane, from_qiskit, to_pennylane, to_qiskit
from hqflow.ir import expr as ex
from hqflow.torch import QuantumLayer

BACKENDS = [("reference", {}), ("compiled", {"dtype": "complex128"}), ("aer", {}), ("pennylane", {})]
rng = np.random.default_rng(2024)


def _statevector_values(qc, params, rows, observables, n):
    ops = [SparsePauliOp.from_sparse_list([(p, w, 1.0)], n) for p, w in observables]
    out = []
    for row in rows:
        sv = Statevector(qc.assign_parameters(dict(zip(params, row))))
        out.append([sv.expectation_value(o).real for o in ops])
    return np.array(out)


def _run(template, x, w, name="reference", **opts):
    return get_backend(name, **opts).submit(CircuitBatch.make(template, x, w)).result().values


# --------------------------------------------------------------------------- Qiskit's feature maps


@pytest.mark.parametrize("backend, opts", BACKENDS)
def test_zz_feature_map_with_real_amplitudes_matches_statevector(backend, opts):
    fmap, ansatz = zz_feature_map(3, reps=2), real_amplitudes(3, reps=2)
    qc = fmap.compose(ansatz)
    t = from_qiskit(qc, inputs=fmap.parameters, weights=ansatz.parameters, observables=["Z0 Z1", "X2"])
    assert len(t.derived) == 3  # one product per pair, shared by both repetitions
    x, w = rng.uniform(0, 2 * np.pi, (6, 3)), rng.uniform(-np.pi, np.pi, t.n_weights)
    expected = _statevector_values(qc, list(fmap.parameters) + list(ansatz.parameters),
                                   [list(r) + list(w) for r in x], [("ZZ", [0, 1]), ("X", [2])], 3)
    np.testing.assert_allclose(_run(t, x, w, backend, **opts), expected, atol=1e-6)


def test_pauli_feature_map_matches_statevector():
    fmap = pauli_feature_map(3, reps=2, paulis=["Z", "XY", "ZZ", "YYZ"], alpha=1.7)
    t = from_qiskit(fmap, inputs=fmap.parameters, observables=["Z0", "X1 Y2", "Z0 Z1 Z2"])
    x = rng.uniform(-2, 2, (5, 3))
    expected = _statevector_values(fmap, list(fmap.parameters), x, [("Z", [0]), ("XY", [1, 2]), ("ZZZ", [0, 1, 2])], 3)
    np.testing.assert_allclose(_run(t, x, None), expected, atol=1e-6)
    np.testing.assert_allclose(_run(t, x, None, "compiled", dtype="complex128"), expected, atol=1e-6)


def test_functions_of_one_or_several_inputs_match_statevector():
    from qiskit import QuantumCircuit

    x = ParameterVector("x", 3)
    qc = QuantumCircuit(2)
    qc.ry((x[0] * x[1]).sin() + x[2] ** 2, 0)
    qc.rz((x[0] - x[2]).exp() / (1 + x[1] ** 2), 1)
    qc.cx(0, 1)
    qc.rx(x[0].arctan() + x[1].cos() * 0.5, 1)
    qc.ry(3 * x[2] + 0.25, 0)  # affine in one input: stays a plain angle
    t = from_qiskit(qc, inputs=x, observables=["Z0", "X1", "Y0 Z1"])
    assert len(t.derived) == 3
    rows = rng.uniform(-1.5, 1.5, (7, 3))
    expected = _statevector_values(qc, list(x), rows, [("Z", [0]), ("X", [1]), ("YZ", [0, 1])], 2)
    for name, opts in BACKENDS:
        np.testing.assert_allclose(_run(t, rows, None, name, **opts), expected, atol=1e-6)


def test_mixing_inputs_and_weights_in_one_angle_is_rejected_with_what_to_do():
    x, theta = Parameter("x"), Parameter("θ")
    from qiskit import QuantumCircuit

    qc = QuantumCircuit(1)
    qc.rx(theta * x, 0)
    with pytest.raises(CircuitError, match=r"mixes inputs and weights .*not both: rotate by the input part"):
        from_qiskit(qc, inputs=[x], weights=[theta])


def test_to_qiskit_writes_the_derived_inputs_as_parameter_expressions():
    fmap = zz_feature_map(2, reps=1)
    t = from_qiskit(fmap, inputs=fmap.parameters, observables=["Z0 Z1"])
    back = to_qiskit(t)
    x = rng.uniform(0, 3, 2)
    got = Statevector(back.assign_parameters(dict(zip(sorted(back.parameters, key=lambda p: p.name), x))))
    want = Statevector(fmap.assign_parameters(dict(zip(fmap.parameters, x))))
    assert abs(got.inner(want)) == pytest.approx(1.0, abs=1e-9)


# --------------------------------------------------------------------------- PennyLane's embeddings


def test_iqp_embedding_matches_default_qubit():
    def circuit(inputs, weights):
        qml.IQPEmbedding(inputs, wires=range(3), n_repeats=2)
        qml.StronglyEntanglingLayers(weights.reshape(1, 3, 3), wires=range(3))
        return qml.expval(qml.Z(0) @ qml.Z(1)), qml.expval(qml.X(2))

    t = from_pennylane(circuit, 3, n_inputs=3, n_weights=9)
    assert [e.format(t.input_names) for e in t.derived] == ["x[0]*x[1]", "x[0]*x[2]", "x[1]*x[2]"]
    x, w = rng.uniform(-2, 2, (5, 3)), rng.uniform(-1, 1, 9)
    dev = qml.device("default.qubit")
    expected = np.array([qml.QNode(circuit, dev)(row, w) for row in x])
    for name, opts in BACKENDS:
        np.testing.assert_allclose(_run(t, x, w, name, **opts), expected, atol=1e-6)


@pytest.mark.parametrize("n_qubits, n_features, pad", [(1, 2, None), (2, 3, 0.0), (3, 8, None), (4, 13, 0.5)])
def test_amplitude_embedding_matches_default_qubit(n_qubits, n_features, pad):
    def circuit(inputs, weights):
        qml.AmplitudeEmbedding(inputs, wires=range(n_qubits), normalize=True, pad_with=pad)
        qml.RY(weights[0], wires=0)
        if n_qubits > 1:
            qml.CNOT([0, n_qubits - 1])
        return [qml.expval(qml.Z(i)) for i in range(n_qubits)] + [qml.expval(qml.X(n_qubits - 1))]

    t = from_pennylane(circuit, n_qubits, n_inputs=n_features, n_weights=1)
    x, w = rng.normal(size=(6, n_features)), rng.uniform(-1, 1, 1)
    dev = qml.device("default.qubit")
    expected = np.array([qml.QNode(circuit, dev)(row, w) for row in x])
    for name, opts in BACKENDS:
        np.testing.assert_allclose(_run(t, x, w, name, **opts), expected, atol=1e-6)


def test_amplitude_embedding_errors_say_what_to_do():
    def unnormalized(inputs, weights):
        qml.AmplitudeEmbedding(inputs, wires=range(1))
        return qml.expval(qml.Z(0))

    with pytest.raises(CircuitError, match=r"norm.*normalize=True"):
        from_pennylane(unnormalized, 1, n_inputs=2)

    def late(inputs, weights):
        qml.Hadamard(0)
        qml.AmplitudeEmbedding(inputs, wires=range(1), normalize=True)
        return qml.expval(qml.Z(0))

    with pytest.raises(CircuitError, match=r"must come before any gate on its wires"):
        from_pennylane(late, 1, n_inputs=2)


def test_to_pennylane_computes_the_derived_inputs():
    def circuit(inputs, weights):
        qml.IQPEmbedding(inputs, wires=range(2))
        qml.RY(weights[0], wires=1)
        return qml.expval(qml.Z(0) @ qml.Z(1))

    t = from_pennylane(circuit, 2, n_inputs=2, n_weights=1)
    x, w = rng.uniform(-1, 1, 2), rng.uniform(-1, 1, 1)
    dev = qml.device("default.qubit")
    assert float(qml.QNode(to_pennylane(t), dev)(x, w)) == pytest.approx(float(qml.QNode(circuit, dev)(x, w)), abs=1e-9)


# --------------------------------------------------------------------------- gradients (chain rule)


def _zz_template():
    fmap, ansatz = zz_feature_map(2, reps=2), real_amplitudes(2, reps=1)
    return from_qiskit(fmap.compose(ansatz), inputs=fmap.parameters, weights=ansatz.parameters,
                       observables=["Z0 Z1", "X1"])


def _finite_difference_inputs(t, x, w, eps=1e-6):
    cols = []
    for i in range(x.shape[1]):
        e = np.zeros_like(x)
        e[:, i] = eps
        cols.append((_run(t, x + e, w) - _run(t, x - e, w)) / (2 * eps))
    return np.stack(cols, -1)


def test_parameter_shift_input_jacobian_follows_the_chain_rule():
    t = _zz_template()
    x, w = rng.uniform(0, 2, (4, 2)), rng.uniform(-1, 1, t.n_weights)
    batch, post = param_shift(t, x, w, wrt="both")
    g = post(get_backend("reference").submit(batch).result())
    np.testing.assert_allclose(g.input_jacobian, _finite_difference_inputs(t, x, w), atol=1e-6)
    np.testing.assert_allclose(g.values, _run(t, x, w), atol=1e-12)


@pytest.mark.parametrize("backend", ["compiled", "reference", "aer", "pennylane"])
def test_torch_layer_input_gradients_through_derived_inputs(backend):
    t = _zz_template()
    x, w = rng.uniform(0, 2, (3, 2)), rng.uniform(-1, 1, t.n_weights)
    layer = QuantumLayer(t, backend=backend, seed=0).double()
    with torch.no_grad():
        layer.weights.copy_(torch.tensor(w))
    xt = torch.tensor(x, requires_grad=True)
    layer(xt).sum().backward()
    np.testing.assert_allclose(xt.grad.numpy(), _finite_difference_inputs(t, x, w).sum(1), atol=1e-5)


def test_a_derived_input_that_is_not_a_number_names_itself_and_the_row():
    from qiskit import QuantumCircuit

    x = ParameterVector("x", 2)
    qc = QuantumCircuit(1)
    qc.ry((x[0] * x[1]).log(), 0)
    t = from_qiskit(qc, inputs=x, observables=["Z0"])
    with pytest.raises(BackendError, match=r"derived input 'log\(x\[0\]\*x\[1\]\)' is nan for row 1"):
        CircuitBatch.make(t, [[1.0, 2.0], [-1.0, 2.0]])


# --------------------------------------------------------------------------- issue 22: zeros and domains


def _amplitude_template(n_qubits=2, n_features=4, pad=None):
    def circuit(inputs, weights):
        qml.AmplitudeEmbedding(inputs, wires=range(n_qubits), normalize=True, pad_with=pad)
        qml.RY(weights[0], wires=0)
        if n_qubits > 1:
            qml.CNOT([0, n_qubits - 1])
        return qml.expval(qml.Z(0)), qml.expval(qml.X(n_qubits - 1))

    return from_pennylane(circuit, n_qubits, n_inputs=n_features, n_weights=1)


# features with zeros: a block of two (rows 0, 1), one alone (row 2), both (row 3)
ZERO_FEATURES = np.array([[1.7, -0.85, 0.0, 0.0], [0.0, 0.0, 0.6, -0.2], [0.5, 0.0, -0.3, 0.8], [0.0, 0.3, 0.0, 0.0]])


@pytest.mark.parametrize("backend, opts", BACKENDS)
def test_amplitude_embedding_input_gradients_at_zero_features_match_finite_differences(backend, opts):  # 22.1
    t, w = _amplitude_template(), np.array([0.4])
    fd = _finite_difference_inputs(t, ZERO_FEATURES, w)  # the values are smooth in the features
    batch, post = param_shift(t, ZERO_FEATURES, w, wrt="both")
    g = post(get_backend(backend, **opts).submit(batch).result())
    np.testing.assert_allclose(g.input_jacobian, fd, atol=1e-6)
    np.testing.assert_allclose(g.values, _run(t, ZERO_FEATURES, w), atol=1e-6)
    assert g.jacobian.shape == (4, 2, 1) and np.isfinite(g.jacobian).all()


@pytest.mark.parametrize("backend", ["compiled", "reference"])
def test_torch_layer_input_gradients_at_zero_features_match_finite_differences(backend):  # 22.1
    t, w = _amplitude_template(3, 7, pad=0.0), np.array([-0.7])
    x = np.array([[1.7, -0.85, 0, 0, 0.3, 0, 0], [0, 0, 0, 0, 0, 0, 1.0], [0.2, 0, -1, 0.5, 0, 0.1, 0.3]])
    layer = QuantumLayer(t, backend=backend).double()
    with torch.no_grad():
        layer.weights.copy_(torch.tensor(w))
    xt = torch.tensor(x, requires_grad=True)
    out = layer(xt)
    out.sum().backward()
    np.testing.assert_allclose(out.detach().numpy(), _run(t, x, w), atol=1e-9)
    np.testing.assert_allclose(xt.grad.numpy(), _finite_difference_inputs(t, x, w).sum(1), atol=1e-6)
    assert np.isfinite(layer.weights.grad.numpy()).all()


def _one_input_circuit(expression):
    from qiskit import QuantumCircuit

    x = ParameterVector("x", 1)
    qc = QuantumCircuit(1)
    qc.ry(expression(x[0]), 0)
    return from_qiskit(qc, inputs=x, observables=["Z0"])


def _error_on_every_path(t, rows, w=()):
    """The message each path gives for ``rows``: jobs, param shift, torch layers, compiled programs."""
    def job():
        _run(t, rows, w)

    def shift():
        param_shift(t, rows, w, wrt="inputs")

    def layer(backend, dtype):
        QuantumLayer(t, backend=backend, weights=w).to(dtype)(torch.tensor(rows, dtype=dtype, requires_grad=True))

    def program(dtype):
        compile_template(t, dtype=dtype)(torch.tensor(rows), torch.tensor(w))

    paths = [job, shift, lambda: layer("compiled", torch.float32), lambda: layer("compiled", torch.float64),
             lambda: layer("reference", torch.float64), lambda: program("complex64"), lambda: program("complex128")]
    messages = []
    for path in paths:
        with pytest.raises(BackendError) as info:
            path()
        messages.append(str(info.value))
    return messages


@pytest.mark.parametrize("expression, good, bad, value", [
    (lambda x: x.log(), 1.0, 0.0, "-inf"), (lambda x: (x - 0.5).log(), 1.0, 0.0, "nan"),
    (lambda x: (x + 0.5).arcsin(), 0.0, 1.0, "nan"), (lambda x: (x * 1000).exp(), 0.1, 1.0, "inf"),
    (lambda x: (1 / x).arctan(), 1.0, 0.0, "undefined"),  # arctan(inf) is a number, 1 / 0 is not
])
def test_an_undefined_derived_input_is_the_same_one_line_error_on_every_path(expression, good, bad, value):  # 22.2
    t = _one_input_circuit(expression)
    messages = _error_on_every_path(t, [[good], [bad]])
    assert len(set(messages)) == 1 and "\n" not in messages[0], messages
    assert re.search(rf"derived input '.*' is {value} for row 1 \(inputs \[{bad:.0f}\.\]\)", messages[0]), messages[0]


@pytest.mark.parametrize("n_qubits, n_features, pad", [(1, 2, None), (2, 4, None), (2, 3, 0.0), (3, 8, None)])
def test_an_all_zero_amplitude_vector_is_a_one_line_error_naming_the_row(n_qubits, n_features, pad):  # 22.3
    t = _amplitude_template(n_qubits, n_features, pad)
    rows = np.zeros((3, n_features))
    rows[0, 0] = rows[2, -1] = 1.0
    messages = _error_on_every_path(t, rows, [0.3])
    assert len(set(messages)) == 1 and "\n" not in messages[0], messages
    assert re.search(r"is nan for row 1 \(inputs \[0\. .*\]\): it is undefined where x\[0\]\*x\[0\] \+ .* is 0$",
                     messages[0]), messages[0]


@pytest.mark.parametrize("expression, row", [
    (lambda x: (x[0] * x[1]) ** 0.5, [0.0, 0.0]),  # constant along each input there
    (lambda x: x[0] + (x[0] * x[1]) ** 0.5, [0.0, 0.0]),  # sqrt(0) stays put along x[0]
    (lambda x: (x[0] ** 2 + x[1] ** 2) ** 0.5, [0.0, 0.0]),  # a cone: the mean of the two slopes
    (lambda x: (x[0] ** 2) ** 0.75 + x[1], [0.0, 0.5]),
])
def test_input_gradients_where_the_chain_rule_meets_0_over_0_match_finite_differences(expression, row):  # 22.1
    from qiskit import QuantumCircuit

    x = ParameterVector("x", 2)
    qc = QuantumCircuit(2)
    qc.ry(x[0], 0)
    qc.rx(expression(x), 1)
    qc.cx(1, 0)
    t = from_qiskit(qc, inputs=x, observables=["Z0", "Y1", "X0 Z1"])
    rows = np.array([row])
    fd = _finite_difference_inputs(t, rows, None)
    batch, post = param_shift(t, rows, None, wrt="inputs")
    np.testing.assert_allclose(post(get_backend("reference").submit(batch).result()).input_jacobian, fd, atol=1e-6)
    xt = torch.tensor(rows, requires_grad=True)
    compile_template(t, dtype="complex128")(xt).sum().backward()
    np.testing.assert_allclose(xt.grad.numpy(), fd.sum(1), atol=1e-6)


@pytest.mark.parametrize("expression, row, where", [
    (lambda x: x[0] ** 0.5 + x[1], [0.0, 1.0], r"derived input .* is not defined on both sides of x\[0\] = 0"),
    (lambda x: (x[0] * x[1]).arcsin(), [1.0, 1.0], r"derived input .* not defined on both sides of x\[0\] = 1"),
    (lambda x: x[0] ** 1.5 + x[1], [0.0, 1.0], r"derived input .* not defined on both sides of x\[0\] = 0"),
])
def test_a_derivative_at_the_edge_of_a_domain_is_a_one_line_error_on_every_path(expression, row, where):  # 22.1
    from qiskit import QuantumCircuit

    x = ParameterVector("x", 2)
    qc = QuantumCircuit(1)
    qc.rx(expression(x), 0)
    t = from_qiskit(qc, inputs=x, observables=["Y0"])
    messages = []
    for path in (lambda: param_shift(t, [row], None, wrt="inputs"),
                 lambda: compile_template(t)(torch.tensor([row], requires_grad=True)),
                 lambda: QuantumLayer(t, backend="reference")(torch.tensor([row], requires_grad=True)).sum().backward()):
        with pytest.raises(BackendError) as info:
            path()
        messages.append(str(info.value))
    assert len(set(messages)) == 1 and "\n" not in messages[0], messages
    assert re.search(rf"the derivative with respect to input 'x\[0\]' does not exist for row 0: {where}", messages[0]), \
        messages[0]
    np.testing.assert_allclose(_run(t, [row], None), _run(t, [row], None))  # the values themselves exist


# --------------------------------------------------------------------------- the template as data


def test_a_graph_with_a_feature_map_round_trips_through_json_and_runs():
    t = _zz_template()
    doc = json.loads(json.dumps({"derived": [e.to_json() for e in t.derived]}))
    assert tuple(ex.Expr.from_json(e) for e in doc["derived"]) == t.derived
    text = _graph_with(t).to_json()
    again = Graph.from_json(text)
    t2 = [f for f in again.fragments if isinstance(f, CircuitCall)][0].circuit
    assert t2 == t and t2.fingerprint() == t.fingerprint()
    x, w = rng.uniform(0, 2, (3, 2)), rng.uniform(-1, 1, t.n_weights)
    np.testing.assert_array_equal(_run(t2, x, w), _run(t, x, w))
    assert "input 2 = 2*(x[0] - π)*(x[1] - π)" in str(t)


def _graph_with(t):
    pipe = hq.Pipeline("fmap")
    pipe.input("x", "array")
    pipe.input("w", "array")
    pipe.execute("circuit", t, backend="reference")
    pipe.connect("input.x", "circuit.inputs")
    pipe.connect("input.w", "circuit.weights")
    pipe.output("circuit.values")
    return pipe.build()


def test_a_pipeline_runs_a_feature_map_template():
    t = _zz_template()
    x, w = rng.uniform(0, 2, (5, 2)), rng.uniform(-1, 1, t.n_weights)
    result = hq.run(_graph_with(t), [{"x": x, "w": w}])
    np.testing.assert_allclose(result.column("values")[0], _run(t, x, w), atol=1e-12)


# --------------------------------------------------------------------------- Expr


def _random_expr(r, depth=0):
    if depth > 3 or r.random() < 0.25:
        return ex.input(int(r.integers(3))) if r.random() < 0.7 else ex.const(float(r.uniform(0.5, 2)))
    op = r.choice(["add", "mul", "sin", "cos", "exp", "arctan", "pow", "arctan2", "sqrt"])
    if op in ("add", "mul", "arctan2"):
        return ex.apply(op, _random_expr(r, depth + 1), _random_expr(r, depth + 1))
    if op == "pow":
        return ex.power(_random_expr(r, depth + 1), ex.const(float(r.choice([2.0, 3.0, -1.0]))))
    if op == "sqrt":
        return ex.apply("sqrt", ex.add(ex.const(1.0), ex.power(_random_expr(r, depth + 1), ex.const(2.0))))
    return ex.apply(op, _random_expr(r, depth + 1))


def test_expr_derivatives_match_finite_differences_and_json_round_trips():
    r = np.random.default_rng(5)
    x = r.uniform(0.5, 1.5, (4, 3))
    checked = 0
    for _ in range(60):
        e = _random_expr(r)
        if e.is_const:
            continue
        assert ex.Expr.from_json(json.loads(json.dumps(e.to_json()))) == e
        with np.errstate(all="ignore"):
            if not np.all(np.isfinite(ex.evaluate(e, x, np))):
                continue
            for i in range(3):
                d = ex.derivative(e, "input", i)
                got = np.broadcast_to(d.value, (4,)) if d.is_const else ex.evaluate(d, x, np)
                h = np.zeros_like(x)
                h[:, i] = 1e-6
                fd = (ex.evaluate(e, x + h, np) - ex.evaluate(e, x - h, np)) / 2e-6
                np.testing.assert_allclose(got, np.broadcast_to(fd, (4,)), rtol=1e-4, atol=1e-5)
        torch_value = ex.evaluate(e, torch.tensor(x), torch)
        np.testing.assert_allclose(np.broadcast_to(torch_value, (4,)), np.broadcast_to(ex.evaluate(e, x, np), (4,)))
        checked += 1
    assert checked >= 20


@pytest.mark.parametrize(
    "doc, message",
    [
        (["nope", ["input", 0]], "unknown expression operation"),
        (["sin"], "takes 1 argument"),
        (["input", -1], "non-negative integer index"),
        (["const", "1"], "one finite number"),
        ("x", "must be a list"),
        (["add", ["input", 0]], "at least 2"),
    ],
)
def test_malformed_expressions_are_one_line_errors(doc, message):
    with pytest.raises(ex.ExprError, match=message):
        ex.Expr.from_json(doc)


@pytest.mark.parametrize(
    "doc, message",
    [
        (["const", 10**400], r"'const' takes one finite number a float holds, got \(an integer of 401 digits\)"),
        (["add", ["input", 0], ["const", -(10**5000)]], r"got \(a negative integer of 5001 digits\)"),
        (["mul", ["const", 1e308], ["const", 10.0], ["input", 0]], r"mul of the constant\(s\) \[1e\+308, 10.0\] is not a "
                                                                   r"finite number"),
    ],
)
def test_numbers_past_a_floats_range_are_expression_errors(doc, message):
    """Issue 22.8: a huge integer (JSON reads one as a Python int) or a product of constants past a float's
    range is one line of ExprError, not an OverflowError or a constant that is infinite."""
    with pytest.raises(ex.ExprError, match=message) as info:
        ex.Expr.from_json(doc)
    assert "\n" not in str(info.value) and len(str(info.value)) < 200
    with pytest.raises(ex.ExprError, match=r"the constant \(an integer of 401 digits\) is past a float's range"):
        ex.const(10**400)


def test_deep_expressions_are_refused_before_recursing():
    doc: list = ["input", 0]
    for _ in range(5000):
        doc = ["sin", doc]
    with pytest.raises(ex.ExprError, match="deeper than"):
        ex.Expr.from_json(doc)


def test_a_template_checks_its_derived_inputs():
    from hqflow.ir import Angle, CircuitTemplate, Op

    ops = (Op("ry", (0,), (Angle.input(1),)),)
    bad = CircuitTemplate(1, ops, ("x",), derived=(ex.weight(0),))
    assert any("may use only the circuit's 1 input" in p for p in bad.problems())
    unused = CircuitTemplate(1, (Op("ry", (0,), (Angle.input(0),)),), ("x",), derived=(ex.apply("sin", ex.input(0)),))
    assert any("is not used by any gate" in p for p in unused.problems())
    good = CircuitTemplate(1, ops, ("x",), derived=(ex.apply("sin", ex.input(0)),), observables=())
    assert good.problems() == [] and good.lowered().input_names == ("sin(x)",)
    assert math.isclose(float(good.encode(np.array([[0.5]]))[0, 0]), math.sin(0.5))
