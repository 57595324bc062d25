"""from_pennylane / to_pennylane: conventions, conversions checked against plain PennyLane, errors."""
import numpy as np
import pennylane as qml
import pytest

from hqflow.backends.base import BackendError, CircuitBatch
from hqflow.backends.reference import ReferenceBackend
from hqflow.ir import Angle, Circuit, CircuitError, GATES, Observable, from_pennylane, gate_matrix
from hqflow.ir.pennylane_io import (
    _GATE_TABLE,
    apply_template,
    observable_to_pennylane,
    pennylane_observable,
    to_pennylane,
)
from hqflow.ir.random import random_template

REF = ReferenceBackend()
DEV = qml.device("default.qubit")


def reference_values(template, inputs, weights):
    return REF.run_checked(CircuitBatch.make(template, inputs, weights)).values


def pennylane_values(qfunc, inputs, weights):
    qnode = qml.QNode(qfunc, DEV)
    return np.array([np.atleast_1d(qnode(x, weights)) for x in inputs], dtype=float).reshape(len(inputs), -1)


# ------------------------------------------------------------------ conventions


def test_gate_table_covers_hqflow_gates_with_the_same_matrices():
    assert set(_GATE_TABLE) == set(GATES)
    rng = np.random.default_rng(0)
    for name, spec in GATES.items():
        angles = rng.uniform(-np.pi, np.pi, size=spec.num_params)
        wires = list(range(spec.num_wires))
        with qml.QueuingManager.stop_recording():
            op = _GATE_TABLE[name][1](*angles, wires=wires)
        expected = gate_matrix(name, angles[None])[0]
        np.testing.assert_allclose(qml.matrix(op, wire_order=wires), expected, atol=1e-12, err_msg=name)
        assert op.name == _GATE_TABLE[name][0]


def test_observable_round_trip():
    obs = Observable.coerce([(0.5, "Z0 X2"), (-1.25, "Y1"), (0.3, "")])
    op = observable_to_pennylane(obs)
    back = pennylane_observable(op, 3)
    assert sorted((t.paulis, t.coeff) for t in back.terms) == sorted((t.paulis, t.coeff) for t in obs.terms)


# ---------------------------------------------------------- from_pennylane works


def test_embedding_layers_and_hamiltonian_match_pennylane():
    n, layers = 3, 2

    def qfunc(inputs, weights):
        qml.AngleEmbedding(inputs, wires=range(n), rotation="Y")
        qml.StronglyEntanglingLayers(weights.reshape(layers, n, 3), wires=range(n))
        return (
            qml.expval(qml.Hamiltonian([0.4, -1.1, 0.25], [qml.Z(0) @ qml.Z(1), qml.X(2), qml.Y(0) @ qml.X(1)])),
            qml.expval(qml.Z(2)),
        )

    t = from_pennylane(qfunc, n, n_inputs=n, n_weights=layers * n * 3)
    assert t.n_observables == 2 and t.name == "qfunc"
    rng = np.random.default_rng(1)
    x, w = rng.normal(size=(4, n)), rng.normal(size=layers * n * 3)
    np.testing.assert_allclose(reference_values(t, x, w), pennylane_values(qfunc, x, w), atol=1e-10)


def test_decompositions_and_affine_expressions_match_pennylane():
    def qfunc(inputs, weights):
        qml.BasisState(np.array([1, 0, 1, 0]), wires=range(4))
        qml.Rot(weights[0], 2 * inputs[0] + 0.5, -weights[1] / 3, wires=1)
        qml.DoubleExcitation(weights[2], wires=[0, 1, 2, 3])
        qml.SingleExcitation(inputs[1] - 0.25, wires=[1, 2])
        qml.adjoint(qml.S(0))
        qml.adjoint(qml.SX(3))
        qml.MultiRZ(np.pi * inputs[0], wires=[0, 2, 3])
        qml.PauliRot(weights[1], "XYZ", wires=[3, 1, 0])
        qml.CRot(0.1, weights[0], 0.3, wires=[2, 0])
        qml.U2(0.2, inputs[1], wires=2)
        qml.QubitUnitary(qml.matrix(qml.Rot(0.3, 0.2, 0.1, wires=0)), wires=1)
        qml.Toffoli(wires=[0, 1, 3])
        return [
            qml.expval(qml.sum(qml.X(0), qml.s_prod(0.5, qml.Z(1) @ qml.Z(2)))),
            qml.expval(qml.dot([0.7, -0.2], [qml.Y(3), qml.X(1) @ qml.X(2)])),
        ]

    t = from_pennylane(qfunc, 4, n_inputs=2, n_weights=3, input_names=["a", "b"])
    assert t.input_names == ("a", "b") and t.weight_names == ("w[0]", "w[1]", "w[2]")
    assert {op.name for op in t.ops} <= set(GATES)
    rng = np.random.default_rng(2)
    x, w = rng.normal(size=(3, 2)), rng.normal(size=3)
    np.testing.assert_allclose(reference_values(t, x, w), pennylane_values(qfunc, x, w), atol=1e-10)


def test_affine_coefficients_are_exact():
    def qfunc(inputs, weights):
        qml.RY(2 * inputs[0] + 0.5, wires=0)
        qml.RX(weights[0] / 8, wires=1)
        qml.PhaseShift(0.75, wires=1)
        qml.CNOT(wires=[0, 1])
        return qml.expval(qml.Z(1))

    t = from_pennylane(qfunc, 2, n_inputs=1, n_weights=1)
    assert [op.name for op in t.ops] == ["ry", "rx", "p", "cx"]
    assert t.ops[0].angles == (Angle.input(0, 2.0, 0.5),)
    assert t.ops[1].angles == (Angle.weight(0, 0.125, 0.0),)
    assert t.ops[2].angles == (Angle.const(0.75),)


def test_observables_argument_and_sampled_templates():
    def gates(inputs, weights):
        qml.Hadamard(0)
        qml.CRY(weights[0], wires=[0, 1])

    t = from_pennylane(gates, 2, n_weights=1, observables=[qml.Z(0) @ qml.Z(1), "X0", [(0.5, "Y1"), (2, "Z0")]])
    assert [str(o) for o in t.observables] == ["+1*Z0 Z1", "+1*X0", "+0.5*Y1 +2*Z0"]
    assert from_pennylane(gates, 2, n_weights=1, shots=100).observables == ()
    assert from_pennylane(gates, 2, n_weights=1, shots=100).shots == 100

    def probs(inputs, weights):
        gates(inputs, weights)
        return qml.probs()

    t = from_pennylane(probs, 2, n_weights=1)
    assert t.observables == ()
    w = np.array([0.7])
    got = REF.run_checked(CircuitBatch.make(t, None, w)).probs[0]
    np.testing.assert_allclose(got, qml.QNode(probs, DEV)(np.zeros(0), w), atol=1e-12)


def test_to_pennylane_matches_reference_and_round_trips():
    rng = np.random.default_rng(3)
    for n in (1, 3, 4):
        t = random_template(rng, n)
        x, w = rng.normal(size=(3, t.n_inputs)), rng.normal(size=(3, t.n_weights))
        expected = reference_values(t, x, w)
        qnode = qml.QNode(to_pennylane(t), DEV)
        got = np.stack([np.asarray(r) for r in qnode(x, w)], axis=1)  # broadcast over rows
        np.testing.assert_allclose(got, expected, atol=1e-10)
        again = from_pennylane(to_pennylane(t), n, t.n_inputs, t.n_weights)
        assert [(op.name, op.wires) for op in again.ops] == [(op.name, op.wires) for op in t.ops]
        np.testing.assert_allclose(reference_values(again, x, w), expected, atol=1e-10)


def test_a_weight_only_in_a_global_phase_is_the_templates_own_with_pennylanes_values():  # 34.2
    """``qml.GlobalPhase(w)`` of a weight (or an input) no gate uses: the template keeps it, as the
    template's phase, with PennyLane's values; to_pennylane gives the phase back."""

    def phased(inputs, weights):
        qml.RY(inputs[0], wires=0)
        qml.RX(weights[0], wires=1)
        qml.CNOT(wires=[0, 1])
        qml.GlobalPhase(0.5 * weights[1] - 0.25 + inputs[1])
        qml.RZ(weights[2], wires=0)
        return [qml.expval(qml.Z(0) @ qml.Z(1)), qml.expval(qml.X(0) + 0.5 * qml.Y(1))]

    t = from_pennylane(phased, 2, n_inputs=2, n_weights=3)
    assert t.phase == (Angle.input(1, -1.0), Angle.weight(1, -0.5))  # exp(-i phi): the phase is -phi
    x, w = np.array([[0.3, 0.7], [1.1, -0.2]]), np.array([0.4, 0.9, -0.7])
    np.testing.assert_allclose(reference_values(t, x, w), pennylane_values(phased, x, w), atol=1e-12)
    assert from_pennylane(to_pennylane(t), 2, 2, 3) == t


def test_to_pennylane_is_differentiable_with_torch():
    torch = pytest.importorskip("torch")
    c = Circuit(2)
    x, w = c.inputs("x", 1), c.weights("w", 2)
    c.ry(x[0], 0).u(w[0], 0.3, 2 * w[1] - 1, 1).cx(0, 1)
    t = c.build(observables=["Z0 Z1"])
    qnode = qml.QNode(to_pennylane(t), DEV, interface="torch")
    wt = torch.tensor([0.4, 0.9], dtype=torch.float64, requires_grad=True)
    qnode(torch.tensor([0.2], dtype=torch.float64), wt).backward()
    eps, base = 1e-6, np.array([0.4, 0.9])
    fd = [
        (reference_values(t, [[0.2]], base + eps * e) - reference_values(t, [[0.2]], base - eps * e))[0, 0] / (2 * eps)
        for e in np.eye(2)
    ]
    np.testing.assert_allclose(wt.grad.numpy(), fd, atol=1e-6)


def test_apply_template_queues_one_op_per_gate():
    t = random_template(np.random.default_rng(4), 3)
    angles = CircuitBatch.make(t, np.zeros((1, t.n_inputs)), np.zeros(t.n_weights)).angles()
    with qml.queuing.AnnotatedQueue() as q:
        apply_template(t, [a[0] for a in angles])
    assert len(q.queue) == len(t.ops)


# ----------------------------------------------------------------------- errors


def test_non_affine_angles_of_weights_and_mixed_angles_are_rejected():
    def sine(inputs, weights):
        qml.RX(np.sin(weights[0]), wires=0)
        return qml.expval(qml.Z(0))

    with pytest.raises(CircuitError, match=r"operation 0 \(RX\): angle 0 is not affine in weight\(s\) w\[0\]"):
        from_pennylane(sine, 1, n_weights=1)

    def product(inputs, weights):
        qml.Hadamard(0)
        qml.Rot(0.1, inputs[0] * weights[0], 0.2, wires=0)
        return qml.expval(qml.Z(0))

    with pytest.raises(CircuitError, match=r"gate RY .*from operation 1 \(Rot\).*mixes inputs and weights "
                                           r"\(x\[0\], w\[0\]\).*two gates"):
        from_pennylane(product, 1, n_inputs=1, n_weights=1)


def test_a_formula_that_branches_on_values_is_rejected():
    def folded(inputs, weights):
        qml.RX(inputs[0] * inputs[1] if inputs[0] > 0 else -inputs[0] * inputs[1], wires=0)
        return qml.expval(qml.Z(0))

    with pytest.raises(CircuitError, match=r"compares x\[0\] > 0 \(control flow on the values"):
        from_pennylane(folded, 1, n_inputs=2)


def test_a_branch_on_an_input_beyond_the_probe_points_is_rejected():
    def f(inputs, weights):  # the probes lie in [-1.25, 2.25]: their gate sequences all agree
        qml.RY(inputs[0], 1)
        if inputs[0] > 2.5:
            qml.X(0)
        return qml.expval(qml.Z(0))

    with pytest.raises(CircuitError, match=r"compares x\[0\] > 2.5"):
        from_pennylane(f, 2, n_inputs=1)


@pytest.mark.parametrize("function, rows", [
    (np.log, [0.2, 3.0]), (np.sqrt, [0.0, 0.3, 4.0]), (np.arcsin, [-1.0, -0.3, 0.99]), (np.arccos, [0.2, 1.0]),
    (lambda v: np.log(v - 1), [1.5, 3.0]), (lambda v: np.log(-v), [-0.5, -3.0]),
    (lambda v: np.arcsin(v + 1), [-1.5, -0.2]), (lambda v: np.sqrt(v * v - 4), [-3.0, 2.5]),
])
def test_functions_with_a_domain_convert_and_match_pennylane_inside_it(function, rows):  # 22.6
    def f(inputs, weights):
        qml.Hadamard(0)
        qml.RY(function(inputs[0]), wires=0)
        qml.RX(weights[0], wires=0)
        return qml.expval(qml.Z(0)), qml.expval(qml.X(0))

    t = from_pennylane(f, 1, n_inputs=1, n_weights=1)
    assert len(t.derived) == 1
    x, w = np.array(rows)[:, None], np.array([0.3])
    np.testing.assert_allclose(reference_values(t, x, w), pennylane_values(f, x, w), atol=1e-12)


def test_an_angle_affine_only_where_it_is_defined_refuses_the_other_rows():  # 22.6
    def f(inputs, weights):
        qml.RY(inputs[0] * np.log(inputs[0]) / np.log(inputs[0]), wires=0)  # x where it is defined
        return qml.expval(qml.Z(0))

    t = from_pennylane(f, 1, n_inputs=1)
    assert len(t.derived) == 1
    np.testing.assert_allclose(reference_values(t, [[0.5], [2.0]], None), pennylane_values(f, [[0.5], [2.0]], []))
    with pytest.raises(BackendError, match=r"is nan for row 1 \(inputs \[1\.\]\): 0 \*\* -1 is not a real number"):
        reference_values(t, [[0.5], [1.0]], None)


def test_a_function_defined_at_no_sample_input_is_a_one_line_error_that_says_so():  # 22.6
    def f(inputs, weights):
        qml.RY(np.log(-inputs[0] * inputs[0] - 1), wires=0)
        return qml.expval(qml.Z(0))

    with pytest.raises(CircuitError, match=r"angle 0 is not a finite number at the sample inputs") as info:
        from_pennylane(f, 1, n_inputs=1)
    assert "\n" not in str(info.value) and "branches" not in str(info.value)


def test_value_dependent_gate_sequence_is_rejected():
    def branchy(inputs, weights):
        if weights[0] < 0:
            qml.Hadamard(0)
        qml.RX(weights[0], wires=0)
        return qml.expval(qml.Z(0))

    with pytest.raises(CircuitError, match=r"gate sequence changes with the values of"):
        from_pennylane(branchy, 1, n_weights=1)


@pytest.mark.parametrize(
    "wire, message",
    [("a", r"RX uses wire 'a'; wires must be the integers 0..1"), (2, r"RX uses wire 2; wires must be")],
)
def test_bad_wires_are_rejected(wire, message):
    def qfunc(inputs, weights):
        qml.RX(0.3, wires=wire)
        return qml.expval(qml.Z(0))

    with pytest.raises(CircuitError, match=message):
        from_pennylane(qfunc, 2)


def test_bad_observables_are_rejected():
    def two(inputs, weights):
        qml.Hadamard(0)
        return qml.expval(qml.Z(0))

    with pytest.raises(CircuitError, match="observables given twice"):
        from_pennylane(two, 1, observables=["Z0"])

    def complex_coeff(inputs, weights):
        qml.Hadamard(0)
        return qml.expval(qml.X(0) @ qml.Y(0))  # = 1j * Z(0)

    with pytest.raises(CircuitError, match="complex coefficient"):
        from_pennylane(complex_coeff, 1)
    with pytest.raises(CircuitError, match="not a sum of Pauli products"):
        from_pennylane(lambda i, w: qml.expval(qml.Hermitian(np.eye(2), wires=0)), 1)
    with pytest.raises(CircuitError, match="measurement var"):
        from_pennylane(lambda i, w: qml.var(qml.Z(0)), 1)
    with pytest.raises(CircuitError, match="acts on qubit"):
        from_pennylane(lambda i, w: qml.Hadamard(0), 1, observables=["Z3"])


def test_unsupported_operations_are_rejected():
    class Opaque(qml.operation.Operation):
        num_wires = 1

    def opaque(inputs, weights):
        Opaque(wires=0)
        return qml.expval(qml.Z(0))

    with pytest.raises(CircuitError, match=r"operation 0 \(Opaque\): Opaque is not supported"):
        from_pennylane(opaque, 1)

    def measured(inputs, weights):
        m = qml.measure(0)
        qml.cond(m, qml.PauliX)(wires=1)
        return qml.expval(qml.Z(1))

    with pytest.raises(CircuitError, match="mid-circuit measurements are not supported"):
        from_pennylane(measured, 2)


def test_parameter_declaration_errors():
    def uses_one(inputs, weights):
        qml.RX(weights[0], wires=0)
        return qml.expval(qml.Z(0))

    with pytest.raises(CircuitError, match=r"extra weight parameter\(s\) \['w\[1\]'\]"):
        from_pennylane(uses_one, 1, n_weights=2)
    with pytest.raises(CircuitError, match="2 weight names given for n_weights=1"):
        from_pennylane(uses_one, 1, n_weights=1, weight_names=["a", "b"])
    with pytest.raises(CircuitError, match="n_qubits must be a positive integer"):
        from_pennylane(uses_one, 0, n_weights=1)
