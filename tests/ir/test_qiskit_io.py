"""The Qiskit edge: from_qiskit / to_qiskit, observables and the QPY round trip.

Expectation values are checked against ``qiskit.quantum_info.Statevector`` with
hand-written Qiskit labels (qubit 0 rightmost), which checks wire order
independently of hqflow's own conversions.
"""
import warnings

import numpy as np
import pytest
from qiskit import QuantumCircuit, QuantumRegister
from qiskit.circuit import Parameter, ParameterVector
from qiskit.circuit.library import PauliEvolutionGate, real_amplitudes, z_feature_map
from qiskit.quantum_info import Operator, Pauli, SparsePauliOp, Statevector

import hqflow as hq
from hqflow.backends import CircuitBatch
from hqflow.backends.reference import ReferenceBackend
from hqflow.ir import Angle, Circuit, CircuitError, Observable, Op, from_qiskit, to_qiskit
from hqflow.ir.qiskit_io import (
    observable_to_sparse_pauli,
    parameters_of,
    template_from_qpy,
    template_to_qpy,
)
from hqflow.ir.random import random_template


def reference_values(template, inputs, weights) -> np.ndarray:
    batch = CircuitBatch.make(template, np.atleast_2d(inputs), weights)
    return ReferenceBackend().run_checked(batch).values[0]


def qiskit_values(qc, binding, labels) -> np.ndarray:
    """Exact expectation values from Qiskit itself (labels: qubit 0 rightmost)."""
    with warnings.catch_warnings():  # PauliEvolutionGate.to_matrix warns from scipy.sparse
        warnings.simplefilter("ignore")
        state = Statevector(qc.assign_parameters(binding))
    return np.array([state.expectation_value(SparsePauliOp.from_list(lab)).real for lab in labels])


# Each qiskit observable (list of (label, coeff), qubit 0 rightmost) and its hqflow twin.
QISKIT_OBS = [
    [("IIZ", 1.0)],
    [("ZXI", 1.0)],
    [("YII", 0.5), ("IZZ", 1.5)],
    [("XYZ", -0.7)],
]
HQFLOW_OBS = ["Z0", "X1 Z2", [(0.5, "Y2"), (1.5, "Z0 Z1")], [(-0.7, "Z0 Y1 X2")]]


# --- from_qiskit agrees with Qiskit's own statevector ------------------------------------


def test_parameters_expressions_and_wire_roles():
    x = Parameter("x")
    w = ParameterVector("w", 3)
    qc = QuantumCircuit(3)
    qc.ry(2 * x + 0.5, 0)
    qc.cx(0, 1)
    qc.cx(2, 0)
    qc.rxx(w[0], 1, 2)
    qc.u(w[1], -x, 0.3, 2)
    qc.crx(w[2] - 1, 2, 0)
    qc.cry(0.5 * x, 1, 2)
    qc.swap(0, 2)
    qc.sx(1)
    t = from_qiskit(qc, inputs=[x], weights=[w], observables=HQFLOW_OBS)
    assert t.input_names == ("x",) and t.weight_names == ("w[0]", "w[1]", "w[2]")
    assert t.ops[0] == Op("ry", (0,), (Angle.input(0, 2.0, 0.5),))
    assert t.ops[2] == Op("cx", (2, 0))
    assert t.ops[4] == Op("u", (2,), (Angle.weight(1), Angle.input(0, -1.0), Angle.const(0.3)))
    assert t.ops[5] == Op("crx", (2, 0), (Angle.weight(2, 1.0, -1.0),))
    xv, wv = 0.37, [0.9, -1.3, 2.1]
    binding = {x: xv, **dict(zip(w, wv))}
    np.testing.assert_allclose(reference_values(t, [xv], wv), qiskit_values(qc, binding, QISKIT_OBS), atol=1e-10)


def test_library_gates_are_decomposed_with_affine_angles():
    x = Parameter("x")
    w = ParameterVector("w", 4)
    qc = QuantumCircuit(3)
    qc.h([0, 1, 2])
    qc.append(PauliEvolutionGate(SparsePauliOp(["XY", "ZZ"], [1.0, 0.5]), time=x), [0, 2])
    qc.rzx(w[0], 0, 1)
    qc.cu(w[1], 0.2, -0.4, 0.1, 2, 1)
    qc.ch(0, 2)
    qc.iswap(0, 1)
    qc.cx(0, 2, ctrl_state=0)
    qc.ecr(1, 2)
    qc.ry(-w[2] / 2 + 1, 1)
    qc.mcx([0, 2], 1)
    qc.crz(3 * w[3] - 0.25, 1, 0)
    t = from_qiskit(qc, inputs=[x], weights=[w], observables=HQFLOW_OBS)
    rng = np.random.default_rng(0)
    for _ in range(3):
        xv, wv = rng.uniform(-np.pi, np.pi), rng.uniform(-np.pi, np.pi, 4)
        binding = {x: xv, **dict(zip(w, wv))}
        np.testing.assert_allclose(
            reference_values(t, [xv], wv), qiskit_values(qc, binding, QISKIT_OBS), atol=1e-9
        )


def test_feature_map_and_ansatz_from_the_library():
    fmap, ansatz = z_feature_map(3, reps=2), real_amplitudes(3, reps=2)
    qc = fmap.compose(ansatz)
    t = from_qiskit(qc, inputs=[fmap.parameters], weights=list(ansatz.parameters), observables=HQFLOW_OBS)
    assert t.n_inputs == 3 and t.n_weights == ansatz.num_parameters
    rng = np.random.default_rng(1)
    xv, wv = rng.uniform(-np.pi, np.pi, 3), rng.uniform(-np.pi, np.pi, t.n_weights)
    binding = {**dict(zip(fmap.parameters, xv)), **dict(zip(ansatz.parameters, wv))}
    np.testing.assert_allclose(reference_values(t, xv, wv), qiskit_values(qc, binding, QISKIT_OBS), atol=1e-10)


def test_registers_barriers_final_measurements_and_global_phase():
    a, b = QuantumRegister(1, "a"), QuantumRegister(2, "b")
    theta = Parameter("theta")
    qc = QuantumCircuit(a, b)
    qc.global_phase = 0.3
    qc.h(a[0])
    qc.barrier()
    qc.cx(a[0], b[1])  # qubit 0 -> qubit 2
    qc.rz(theta, b[0])
    qc.measure_all()
    qc.measure(b[0], 0)  # measuring again is still final
    t = from_qiskit(qc, inputs=["theta"])
    assert t.n_qubits == 3
    assert t.ops == (Op("h", (0,)), Op("cx", (0, 2)), Op("rz", (1,), (Angle.input(0),)))


def test_parameter_order_follows_the_lists_and_accepts_mixtures():
    a, b, c = Parameter("a"), Parameter("b"), Parameter("c")
    v = ParameterVector("v", 2)
    qc = QuantumCircuit(2)
    for k, p in enumerate([a, b, c, v[0], v[1]]):
        qc.rx(p, k % 2)
    t = from_qiskit(qc, inputs=[c, "a"], weights=[v, b])
    assert t.input_names == ("c", "a") and t.weight_names == ("v[0]", "v[1]", "b")
    assert t.ops[0].angles == (Angle.input(1),) and t.ops[1].angles == (Angle.weight(2),)
    assert from_qiskit(qc, inputs="a", weights=[b, c, v]).input_names == ("a",)


def test_sparse_pauli_observables_and_template_fields():
    qc = QuantumCircuit(3)
    qc.h(0)
    obs = [SparsePauliOp.from_list([("XIZ", 0.5), ("III", -1.0)]), Pauli("-YI"), "Z1"]
    t = from_qiskit(qc, observables=obs, shots=100, name="demo")
    assert t.shots == 100 and t.name == "demo"
    assert t.observables[0] == Observable.coerce([(0.5, "Z0 X2"), (-1.0, "")])
    assert t.observables[1] == Observable.coerce([(-1.0, "Y1")])
    assert from_qiskit(qc, observables=SparsePauliOp("ZI")).observables == (Observable.coerce("Z1"),)
    assert from_qiskit(qc).name == qc.name


# --- errors -------------------------------------------------------------------------------


def one_gate(angle, gate="rx") -> QuantumCircuit:
    qc = QuantumCircuit(2)
    getattr(qc, gate)(angle, 0)
    return qc


def test_unbound_and_extra_parameters():
    theta, phi = Parameter("theta"), Parameter("phi")
    with pytest.raises(CircuitError, match=r"unbound parameter\(s\) \['theta'\]"):
        from_qiskit(one_gate(theta))
    with pytest.raises(CircuitError, match=r"extra parameter\(s\) \['phi'\]"):
        from_qiskit(one_gate(theta), inputs=[theta], weights=[phi])
    with pytest.raises(CircuitError, match=r"\['theta'\] listed as both inputs and weights"):
        from_qiskit(one_gate(theta), inputs=[theta], weights=["theta"])
    with pytest.raises(CircuitError, match=r"\['theta'\] listed twice in inputs"):
        from_qiskit(one_gate(theta), inputs=[theta, theta])
    with pytest.raises(CircuitError, match=r"must be qiskit Parameters, ParameterVectors or names; got 3"):
        from_qiskit(one_gate(theta), inputs=[3])


@pytest.mark.parametrize(
    "make",
    [lambda x, y: x * y, lambda x, y: x + y, lambda x, y: x.sin(), lambda x, y: x**2, lambda x, y: 1 / (x + 2)],
)
def test_non_affine_angles_of_inputs_become_derived_inputs_and_of_weights_are_rejected(make):
    x, y = Parameter("x"), Parameter("y")
    qc = one_gate(make(x, y))
    t = from_qiskit(qc, inputs=list(qc.parameters))
    assert len(t.derived) == 1 and t.ops[0].angles[0] == Angle.input(t.n_inputs)
    with pytest.raises(CircuitError, match=r"gate 'rx' on qubit\(s\) \[0\]: angle .* is not affine in weight"):
        from_qiskit(qc, weights=list(qc.parameters))


def test_an_angle_that_mixes_an_input_and_a_weight_is_rejected_with_what_to_do():
    x, w = Parameter("x"), Parameter("w")
    with pytest.raises(CircuitError, match=r"mixes inputs and weights \(w, x\).*two gates.*as an input"):
        from_qiskit(one_gate(w * x), inputs=[x], weights=[w])


def test_non_unitary_circuits_are_rejected():
    qc = QuantumCircuit(2, 1)
    qc.h(0)
    qc.measure(0, 0)
    qc.x(0)
    with pytest.raises(CircuitError, match=r"mid-circuit measurement on qubit\(s\) \[0\]"):
        from_qiskit(qc)

    qc = QuantumCircuit(2, 1)
    qc.measure(0, 0)
    with qc.if_test((qc.clbits[0], 1)):
        qc.x(1)
    with pytest.raises(CircuitError, match=r"classical control flow \('if_else'\)"):
        from_qiskit(qc)

    qc = QuantumCircuit(2)
    qc.h(0)
    qc.reset(0)
    with pytest.raises(CircuitError, match=r"reset on qubit\(s\) \[0\]"):
        from_qiskit(qc)

    qc = QuantumCircuit(1)
    qc.initialize([0, 1], 0)
    with pytest.raises(CircuitError, match=r"non-unitary instruction 'initialize'"):
        from_qiskit(qc)


def test_unknown_objects_and_bad_observables():
    with pytest.raises(CircuitError, match=r"expects a qiskit QuantumCircuit, got Operator"):
        from_qiskit(Operator(np.eye(2)))
    qc = QuantumCircuit(2)
    with pytest.raises(CircuitError, match=r"unsupported observable type Operator"):
        from_qiskit(qc, observables=[Operator(np.eye(4))])
    with pytest.raises(CircuitError, match=r"complex coefficient"):
        from_qiskit(qc, observables=[SparsePauliOp(["ZI"], [1j])])
    with pytest.raises(CircuitError, match=r"observable 0 .* acts on qubit\(s\) \[2\]"):
        from_qiskit(qc, observables=[SparsePauliOp("ZII")])


# --- to_qiskit, parameters_of, observables ------------------------------------------------


def test_to_qiskit_statevector_matches_reference():
    for seed in range(10):
        rng = np.random.default_rng(seed)
        t = random_template(rng, int(rng.integers(1, 6)), n_observables=0)
        x, w = rng.uniform(-np.pi, np.pi, (1, t.n_inputs)), rng.uniform(-np.pi, np.pi, t.n_weights)
        qc = to_qiskit(t)
        p_in, p_w = parameters_of(qc, t)
        assert [p.name for p in p_in] == list(t.input_names) and [p.name for p in p_w] == list(t.weight_names)
        bound = qc.assign_parameters(dict(zip(p_in + p_w, np.concatenate([x[0], w]))))
        probs = Statevector(bound).probabilities()  # qubit 0 least significant
        want = ReferenceBackend().run_checked(CircuitBatch.make(t, x, w)).probs[0]
        np.testing.assert_allclose(probs, want.reshape((2,) * t.n_qubits).T.ravel(), atol=1e-12)


def test_parameters_of_reports_missing_names():
    c = Circuit(1)
    x = c.inputs("x", 1)
    t = c.rx(x[0], 0).build()
    with pytest.raises(CircuitError, match=r"no parameter\(s\) \['x\[0\]'\]"):
        parameters_of(QuantumCircuit(1), t)


def test_observable_to_sparse_pauli_puts_qubit_zero_last():
    obs = Observable.coerce([(0.5, "Z0 X2"), (-2.0, "Y1"), (1.0, "")])
    op = observable_to_sparse_pauli(obs, 3)
    assert op == SparsePauliOp.from_list([("XIZ", 0.5), ("IYI", -2.0), ("III", 1.0)])
    assert from_qiskit(QuantumCircuit(3), observables=[op]).observables[0] == obs


def test_to_qiskit_round_trips_through_from_qiskit():
    for seed in range(20):
        rng = np.random.default_rng(100 + seed)
        t = random_template(rng, int(rng.integers(1, 9)))
        assert from_qiskit(to_qiskit(t), t.input_names, t.weight_names, t.observables, name=t.name) == t


# --- QPY ------------------------------------------------------------------------------------


def test_qpy_round_trip_is_exact_on_random_templates():
    for seed in range(60):
        rng = np.random.default_rng(seed)
        t = random_template(rng, 1 + seed % 8).with_shots(None if seed % 3 else 500)
        data = template_to_qpy(t)
        assert isinstance(data, str)
        back = template_from_qpy(data, t.input_names, t.weight_names, t.observables, t.shots, t.name)
        assert back == t
        assert back.fingerprint() == t.fingerprint()


def test_qpy_round_trip_keeps_special_angles():
    c = Circuit(2, name="angles")
    x = c.inputs("x", 1)
    w = c.weights("w", 1)
    c.rx(-x[0], 0).ry(0 * w[0] + 0.25, 1).rz(1e-9 * x[0] - 1e9, 0).u(w[0], -0.0, np.pi, 1).cp(x[0] - 1.5, 0, 1)
    t = c.build(observables=["Z0"])
    assert template_from_qpy(template_to_qpy(t), t.input_names, t.weight_names, t.observables, name="angles") == t


def test_qpy_bad_data():
    with pytest.raises(CircuitError, match=r"QPY data for circuit 'circuit' is not base64"):
        template_from_qpy("not base64 at all!", (), ())


def test_qpy_whose_header_declares_more_than_it_holds_is_refused_before_loading():
    import base64
    import tracemalloc

    t = Circuit(1).rx(0.3, 0).build(observables=["Z0"])
    raw = bytearray(base64.b64decode(template_to_qpy(t)))
    refused = 0
    tracemalloc.start()
    try:
        for pos in range(19, 80):  # the header's size fields: one changed byte made qpy.load take 20 s and 4 GB
            bad = bytearray(raw)
            bad[pos] = 0xFF
            try:
                template_from_qpy(base64.b64encode(bytes(bad)).decode(), (), (), ["Z0"])
            except CircuitError:
                refused += 1
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # memory, not time, so the check holds on a busy machine: a size field believed allocates gigabytes
    assert refused > 20 and peak < 64 * 2**20, f"decoding bad headers peaked at {peak / 2**20:.0f} MiB"


def test_a_parameter_only_in_the_global_phase_need_not_be_listed_and_listed_is_the_templates_own():  # 22.4, 34.2
    """Qiskit's Estimator binds a parameter that only sets the global phase and ignores it: so does a template
    that lists it (as a weight or an input). Its values are Qiskit's, and to_qiskit, QPY and the graph JSON
    keep it."""
    from qiskit.circuit.library import GlobalPhaseGate
    from qiskit.primitives import StatevectorEstimator

    from hqflow.ir import Graph

    a, t, x = Parameter("a"), Parameter("t"), Parameter("x")
    labels = [[("ZZ", 1.0)], [("IX", 0.5), ("YI", -1.0)]]
    observables = ["Z0 Z1", [(0.5, "X0"), (-1.0, "Y1")]]
    for how in ("attribute", "gate"):
        qc = QuantumCircuit(2)
        qc.ry(x, 0)
        qc.rx(a, 1)
        qc.cx(0, 1)
        if how == "attribute":
            qc.global_phase = 2 * t + a
        else:
            qc.append(GlobalPhaseGate(t), [])
        assert from_qiskit(qc, inputs=[x], weights=[a], observables=["Z0"]).weight_names == ("a",)  # unlisted
        binding = {x: 0.3, a: 0.4, t: 0.9}
        expected = qiskit_values(qc, binding, labels)
        pub = (qc, [SparsePauliOp.from_list(lab) for lab in labels], {tuple(binding): list(binding.values())})
        assert StatevectorEstimator().run([pub]).result()[0].data.evs == pytest.approx(expected, abs=1e-12)
        for inputs, weights in (([x], [a, t]), ([x, t], [a])):
            template = from_qiskit(qc, inputs=inputs, weights=weights, observables=observables, name="phased")
            assert "t" in template.input_names + template.weight_names
            got = reference_values(template, [binding[p] for p in inputs], [binding[p] for p in weights])
            assert got == pytest.approx(expected, abs=1e-12)
            names = (template.input_names, template.weight_names, observables, None, "phased")
            assert from_qiskit(to_qiskit(template), *names[:3], name="phased") == template
            assert template_from_qpy(template_to_qpy(template), *names) == template
            pipe = hq.Pipeline("phase").input("x", "array").input("w", "array")
            pipe.execute("circuit", template)
            graph = pipe.connect("input.x", "circuit.inputs").connect("input.w", "circuit.weights").output(
                "circuit.values").build()
            assert Graph.from_json(graph.to_json()).fragment("circuit").circuit == template


def _one_input(expression) -> tuple[QuantumCircuit, Parameter]:
    x = Parameter("x")
    qc = QuantumCircuit(1)
    qc.h(0)
    qc.ry(expression(x), 0)
    return qc, x


@pytest.mark.parametrize("expression, rows", [
    (lambda x: (x - 1).log(), [1.5, 3.0]),
    (lambda x: (x + 1).arcsin(), [-1.9, -0.4, 0.0]),
    (lambda x: (x - 3).arccos(), [2.5, 3.9]),
    (lambda x: (x - 1000).log() * 0.5, [1000.5, 1200.0]),  # no probe point inside: checked symbolically
    (lambda x: (2 - x) ** 0.5, [-3.0, 1.0, 2.0]),
])
def test_expressions_are_checked_inside_their_domain(expression, rows):  # 22.7
    qc, x = _one_input(expression)
    template = from_qiskit(qc, inputs=[x], observables=["Z0", "X0"])
    for row in rows:
        expected = qiskit_values(qc, {x: row}, [[("Z", 1.0)], [("X", 1.0)]])
        np.testing.assert_allclose(reference_values(template, [row], None), expected, atol=1e-12)


def test_an_angle_that_is_a_number_nowhere_is_a_one_line_error():  # 22.7
    x = Parameter("x")
    qc = QuantumCircuit(1)
    qc.rz(x, 0)
    qc.rx((x - x) ** -1.0, 0)
    with pytest.raises(CircuitError, match="not a finite number") as info:
        from_qiskit(qc, inputs=[x], observables=["Z0"])
    assert "\n" not in str(info.value)
