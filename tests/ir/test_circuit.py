"""CircuitTemplate, observables, the Circuit builder and the gate table."""
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from scipy.linalg import expm

from hqflow.ir import (
    GATES,
    SHIFT_RULES,
    Angle,
    Circuit,
    CircuitError,
    CircuitTemplate,
    Observable,
    Op,
    PauliTerm,
    gate_matrix,
)
from hqflow.ir.random import random_template

I2 = np.eye(2, dtype=complex)
X = np.array([[0, 1], [1, 0]], dtype=complex)
Y = np.array([[0, -1j], [1j, 0]], dtype=complex)
Z = np.diag([1.0 + 0j, -1.0])
P0 = np.diag([1.0 + 0j, 0.0])  # |0><0|
P1 = np.diag([0.0 + 0j, 1.0])  # |1><1|


def m(name, *angles):
    """The single (unbatched) matrix of a gate."""
    if GATES[name].num_params == 0:
        return gate_matrix(name, np.zeros((1, 0)))[0]
    return gate_matrix(name, np.array([angles], dtype=float))[0]


# --- PauliTerm.parse / Observable.coerce --------------------------------------


@pytest.mark.parametrize(
    "text, paulis",
    [
        ("Z0 Z1", ((0, "Z"), (1, "Z"))),
        ("Z0Z1", ((0, "Z"), (1, "Z"))),
        ("Z1 X0", ((0, "X"), (1, "Z"))),  # sorted by wire
        ("X2", ((2, "X"),)),
        ("Y10", ((10, "Y"),)),  # multi-digit wires
        ("I0 Z1", ((1, "Z"),)),  # identities dropped
        ("X0*Y1", ((0, "X"), (1, "Y"))),
        ("", ()),  # identity
    ],
)
def test_pauli_term_parse_good(text, paulis):
    term = PauliTerm.parse(text, 0.5)
    assert term.paulis == paulis
    assert term.coeff == 0.5
    assert term.wires == tuple(w for w, _ in paulis)


@pytest.mark.parametrize("text", ["z0", "Z", "Q0", "Z0 Z", "0Z", "Z-1", "Z0,Z1"])
def test_pauli_term_parse_bad(text):
    with pytest.raises(CircuitError, match=re.escape(f"cannot parse Pauli term {text!r}")) as info:
        PauliTerm.parse(text)
    assert "e.g. 'Z0 Z1'" in str(info.value)


@pytest.mark.parametrize("text", ["Z0 Z0", "X1 Y1", "Z0 I0"])
def test_pauli_term_parse_repeated_wire(text):
    with pytest.raises(CircuitError, match=r"names wire \d twice"):
        PauliTerm.parse(text)


def test_pauli_term_parse_identity_then_pauli_on_same_wire_is_rejected():
    with pytest.raises(CircuitError, match="names wire 0 twice"):
        PauliTerm.parse("I0 Z0")


def test_pauli_term_str():
    assert str(PauliTerm.parse("Z1 X0", -2)) == "-2*X0 Z1"
    assert str(PauliTerm.parse("")) == "+1*I"


def test_observable_coerce_forms():
    from_str = Observable.coerce("Z0 Z1")
    assert from_str.terms == (PauliTerm(1.0, ((0, "Z"), (1, "Z"))),)
    term = PauliTerm.parse("X3", 2.0)
    assert Observable.coerce(term).terms == (term,)
    assert Observable.coerce(from_str) is from_str
    pairs = Observable.coerce([(0.5, "Z0"), (-1, "X1 Y2")])
    assert pairs.terms == (PauliTerm(0.5, ((0, "Z"),)), PauliTerm(-1.0, ((1, "X"), (2, "Y"))))
    assert pairs.wires == (0, 1, 2)
    assert Observable.coerce([(1, "Z2"), (1, "Z0 Z2")]).wires == (0, 2)


@pytest.mark.parametrize("bad", [5, [(1.0,)], [("abc", "Z0")], [(1.0, "Z0", 3)], None])
def test_observable_coerce_unreadable(bad):
    with pytest.raises(CircuitError, match=r"cannot read observable .*give 'Z0 Z1' or a list of \(coeff, 'Z0 Z1'\) pairs"):
        Observable.coerce(bad)


def test_observable_coerce_bad_term_text_keeps_parse_message():
    with pytest.raises(CircuitError, match="cannot parse Pauli term 'W0'"):
        Observable.coerce([(1.0, "W0")])


def test_observable_coerce_empty():
    with pytest.raises(CircuitError, match="an observable needs at least one term"):
        Observable.coerce([])


def test_observable_coerce_swapped_pair_gives_circuit_error():
    with pytest.raises(CircuitError, match="cannot read observable"):
        Observable.coerce([("Z0", 1.0)])


# --- CircuitTemplate.problems -------------------------------------------------


def good_template(**changes) -> CircuitTemplate:
    base = dict(
        n_qubits=2,
        ops=(
            Op("ry", (0,), (Angle.input(0),)),
            Op("cx", (0, 1)),
            Op("rz", (1,), (Angle.weight(0, 2.0, 0.1),)),
        ),
        input_names=("x",),
        weight_names=("w",),
        observables=(Observable.coerce("Z0 Z1"),),
        shots=None,
        name="t",
    )
    base.update(changes)
    return CircuitTemplate(**base)


def only_problem(t: CircuitTemplate) -> str:
    probs = t.problems()
    assert len(probs) == 1, probs
    return probs[0]


def test_good_template_has_no_problems():
    t = good_template()
    assert t.problems() == []
    assert t.check() is t
    assert (t.n_inputs, t.n_weights, t.n_observables) == (1, 1, 1)


def _with_op(op, **kw):
    t = good_template(**kw)
    return good_template(ops=t.ops + (op,), **kw)


@pytest.mark.parametrize(
    "t, expected",
    [
        (_with_op(Op("foo", (0,))), "circuit 't', op 3 (foo): unknown gate 'foo'; known gates: " + ", ".join(sorted(GATES))),
        (_with_op(Op("cx", (0,))), "circuit 't', op 3 (cx): acts on 2 wire(s), got [0]"),
        (_with_op(Op("h", (2,))), "circuit 't', op 3 (h): wire(s) [2] outside the circuit's 2 qubits"),
        (_with_op(Op("h", (-1,))), "circuit 't', op 3 (h): wire(s) [-1] outside the circuit's 2 qubits"),
        (_with_op(Op("cz", (1, 1))), "circuit 't', op 3 (cz): repeated wire in [1, 1]"),
        (_with_op(Op("rx", (0,))), "circuit 't', op 3 (rx): takes 1 angle(s), got 0"),
        (_with_op(Op("h", (0,), (Angle.const(1.0),))), "circuit 't', op 3 (h): takes 0 angle(s), got 1"),
        (_with_op(Op("rx", (0,), (Angle.weight(1),))), "circuit 't', op 3 (rx): unbound parameter (weight #1) is not declared"),
        (_with_op(Op("rx", (0,), (Angle.input(-1),))), "circuit 't', op 3 (rx): unbound parameter (input #-1) is not declared"),
        (_with_op(Op("rx", (0,), (Angle("bogus", 0),))), "circuit 't', op 3 (rx): unbound parameter (bogus #0) is not declared"),
        (good_template(input_names=("x", "y")), "circuit 't': extra input parameter(s) ['y'] not used by any gate"),
        (good_template(weight_names=("w", "v", "u")), "circuit 't': extra weight parameter(s) ['v', 'u'] not used by any gate"),
        (
            good_template(observables=(Observable.coerce([(1.0, "Z0"), (2.0, "X3")]),)),
            "circuit 't': observable 0 (+1*Z0 +2*X3) acts on qubit(s) [3] but the circuit has only 2 qubits",
        ),
        (good_template(shots=0), "circuit 't': shots must be a positive integer or None, got 0"),
        (good_template(shots=2.5), "circuit 't': shots must be a positive integer or None, got 2.5"),
    ],
)
def test_problems_single(t, expected):
    assert only_problem(t) == expected
    with pytest.raises(CircuitError, match=re.escape(expected)):
        t.check()


def test_problem_non_integer_wire():
    t = _with_op(Op("h", (1.0,)))
    assert any("wire" in p for p in t.problems())


def test_problem_duplicate_names():
    t = good_template(
        ops=good_template().ops + (Op("rx", (0,), (Angle.input(1),)),),
        input_names=("x", "x"),
    )
    assert only_problem(t) == "circuit 't': duplicate input names in ['x', 'x']"
    t = good_template(
        ops=good_template().ops + (Op("rx", (0,), (Angle.weight(1),)),),
        weight_names=("w", "w"),
    )
    assert only_problem(t) == "circuit 't': duplicate weight names in ['w', 'w']"


def test_problem_input_weight_clash():
    t = good_template(weight_names=("x",))
    assert only_problem(t) == "circuit 't': parameters ['x'] are both inputs and weights"


@pytest.mark.parametrize("n", [0, -1, 1.5, "2"])
def test_problem_bad_qubit_count(n):
    assert good_template(n_qubits=n).problems() == [
        f"circuit 't': n_qubits must be a positive integer, got {n!r}"
    ]


@pytest.mark.parametrize("n", [10_001, 10**80])
def test_a_qubit_count_past_the_cap_is_refused_at_build_from_every_edge(n):
    """The builder, a graph document, PennyLane and Qiskit: refused where the template is made, not at to_json."""
    from hqflow.ir import Graph, GraphError, from_pennylane, from_qiskit
    from hqflow.ir.circuit import MAX_QUBITS

    why = f"n_qubits must be at most {MAX_QUBITS:,} (hqflow.ir.circuit.MAX_QUBITS)"
    shown = n if n < 10**20 else "(an integer of 81 digits)"
    assert good_template(n_qubits=n).problems() == [f"circuit 't': {why}, got {shown}"]
    c = Circuit(n, name="big")
    c.ry(c.weights("w", 1)[0], 0)
    with pytest.raises(CircuitError, match=re.escape(why)):
        c.build(observables=["Z0"])
    doc = json.loads(_graph_with(good_template()))
    next(f for f in doc["fragments"] if f["circuit"])["circuit"]["n_qubits"] = n
    with pytest.raises(GraphError, match=re.escape(why)):
        Graph.from_json(json.dumps(doc))
    import pennylane as qml

    def qfunc(inputs, weights):
        qml.RX(weights[0], wires=0)
        return qml.expval(qml.Z(0))

    with pytest.raises(CircuitError, match=re.escape(why)):
        from_pennylane(qfunc, n, n_weights=1)
    if n == MAX_QUBITS + 1:
        from qiskit import QuantumCircuit

        qc = QuantumCircuit(n)
        qc.h(0)
        with pytest.raises(CircuitError, match=re.escape(why)):
            from_qiskit(qc, observables=["Z0"])
    assert good_template(n_qubits=MAX_QUBITS).problems() == []


def _graph_with(template) -> str:
    import hqflow as hq

    pipe = hq.Pipeline("big")
    pipe.input("x", "array")
    pipe.input("w", "array")
    pipe.execute("circuit", template)
    pipe.connect("input.x", "circuit.inputs")
    pipe.connect("input.w", "circuit.weights")
    pipe.output("circuit.values")
    return pipe.build().to_json()


def test_problems_lists_everything_and_check_joins_them():
    t = good_template(
        ops=good_template().ops + (Op("foo", (0,)), Op("cx", (0, 5))),
        shots=-3,
    )
    probs = t.problems()
    assert len(probs) == 3
    assert any("unknown gate 'foo'" in p for p in probs)
    assert any("wire(s) [5] outside" in p for p in probs)
    assert any("shots must be a positive integer" in p for p in probs)
    with pytest.raises(CircuitError) as info:
        t.check()
    assert str(info.value) == "; ".join(probs)


def test_with_observables_and_shots_return_new_templates():
    t = good_template()
    t2 = t.with_observables(["X0", [(0.5, "Y1")]]).with_shots(100)
    assert t.shots is None and t.observables == (Observable.coerce("Z0 Z1"),)
    assert t2.shots == 100
    assert t2.observables == (Observable.coerce("X0"), Observable.coerce([(0.5, "Y1")]))
    assert t2.ops == t.ops


# --- fingerprint / to_dict / from_dict ----------------------------------------


def test_fingerprint_stable_and_content_based():
    a, b = good_template(), good_template()
    assert a is not b
    assert a.fingerprint() == b.fingerprint()
    assert a.fingerprint() == a.fingerprint()
    assert re.fullmatch(r"[0-9a-f]{16}", a.fingerprint())
    # equal templates hash equal (the cache field is not compared)
    a.fingerprint()
    assert a == b and hash(a) == hash(b)


@pytest.mark.parametrize(
    "changes",
    [
        dict(name="other"),
        dict(shots=100),
        dict(n_qubits=3),
        dict(input_names=("y",)),
        dict(weight_names=("v",)),
        dict(observables=(Observable.coerce("Z0"),)),
        dict(observables=(Observable.coerce([(2.0, "Z0 Z1")]),)),
        dict(ops=(Op("ry", (0,), (Angle.input(0),)), Op("cx", (1, 0)), Op("rz", (1,), (Angle.weight(0, 2.0, 0.1),)))),
        dict(ops=(Op("ry", (0,), (Angle.input(0),)), Op("cx", (0, 1)), Op("rz", (1,), (Angle.weight(0, 2.0, 0.2),)))),
        dict(ops=(Op("ry", (0,), (Angle.input(0),)), Op("cx", (0, 1)), Op("rz", (1,), (Angle.weight(0, 3.0, 0.1),)))),
        dict(ops=(Op("rx", (0,), (Angle.input(0),)), Op("cx", (0, 1)), Op("rz", (1,), (Angle.weight(0, 2.0, 0.1),)))),
    ],
)
def test_fingerprint_changes_on_edit(changes):
    base = good_template()
    edited = good_template(**changes)
    assert edited != base
    assert edited.fingerprint() != base.fingerprint()


def test_fingerprint_cache_not_shared_by_replace():
    t = good_template()
    fp = t.fingerprint()
    t2 = t.with_shots(10)
    assert t2.fingerprint() != fp
    assert t.fingerprint() == fp


def test_fingerprint_stable_across_processes():
    code = (
        "from hqflow.ir import Circuit\n"
        "c = Circuit(2, name='t'); x = c.inputs('x', 1); w = c.weights('w', 1)\n"
        "c.ry(x[0], 0).cx(0, 1).rz(2 * w[0] + 0.1, 1)\n"
        "print(c.build(observables=['Z0 Z1']).fingerprint())\n"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    c = Circuit(2, name="t")
    x, w = c.inputs("x", 1), c.weights("w", 1)
    c.ry(x[0], 0).cx(0, 1).rz(2 * w[0] + 0.1, 1)
    t = c.build(observables=["Z0 Z1"])
    assert re.fullmatch(r"[0-9a-f]{16}", out.stdout.strip())
    assert out.stdout.strip() == t.fingerprint()
    # the same content under other symbol names is a different template
    assert t.fingerprint() != good_template().fingerprint()
    assert t.ops == good_template().ops


def test_to_dict_is_json_data_and_round_trips():
    rng = np.random.default_rng(7)
    templates = [good_template(), good_template(shots=50, name="s")]
    templates += [random_template(rng, n) for n in (1, 2, 3, 4)]
    for t in templates:
        d = t.to_dict()
        d2 = json.loads(json.dumps(d))
        back = CircuitTemplate.from_dict(d2)
        assert back == t
        assert back.fingerprint() == t.fingerprint()


def test_to_dict_content():
    d = good_template().to_dict()
    assert d == {
        "name": "t",
        "n_qubits": 2,
        "ops": [["ry", [0], [["input", 0, 1.0, 0.0]]], ["cx", [0, 1], []], ["rz", [1], [["weight", 0, 2.0, 0.1]]]],
        "inputs": ["x"],
        "weights": ["w"],
        "observables": [[[1.0, [[0, "Z"], [1, "Z"]]]]],
        "shots": None,
    }


def test_str_mentions_shape_and_observables():
    s = str(good_template(shots=10))
    assert "CircuitTemplate 't': 2 qubits, 3 ops, 1 inputs, 1 weights, 10 shots" in s
    assert "<O0> = +1*Z0 Z1" in s
    assert "exact" in str(good_template())


# --- Circuit builder ----------------------------------------------------------


def test_builder_affine_sym_arithmetic():
    c = Circuit(2, name="b")
    x = c.inputs("x", 2)
    w = c.weights("w", 2)
    c.ry(x[0], 0)
    c.ry(2 * x[1] + 0.1, 1)
    c.rz((w[0] + 1) * 3, 0)  # scale applies to the offset too
    c.rx(-w[1], 1)
    c.rx(w[1] * 0.5 - 0.25, 0)
    c.rz(0.3 + w[0], 1)
    c.cx(0, 1).rz(1.25, 0)
    t = c.build(observables=["Z0", [(0.5, "X1")]], shots=None)
    angles = [op.angles for op in t.ops]
    assert angles[0] == (Angle("input", 0, 1.0, 0.0),)
    assert angles[1] == (Angle("input", 1, 2.0, 0.1),)
    assert angles[2] == (Angle("weight", 0, 3.0, 3.0),)
    assert angles[3] == (Angle("weight", 1, -1.0, -0.0),)
    assert angles[4] == (Angle("weight", 1, 0.5, -0.25),)
    assert angles[5] == (Angle("weight", 0, 1.0, 0.3),)
    assert t.ops[6] == Op("cx", (0, 1), ())
    assert t.ops[7] == Op("rz", (0,), (Angle.const(1.25),))
    assert t.input_names == ("x[0]", "x[1]")
    assert t.weight_names == ("w[0]", "w[1]")
    assert t.name == "b" and t.n_qubits == 2


def test_builder_multiparameter_gate_argument_order():
    c = Circuit(2)
    w = c.weights("w", 1)
    c.u(0.1, w[0], 0.3, 1).crx(w[0] * 2, 1, 0)
    t = c.build()
    assert t.ops[0] == Op("u", (1,), (Angle.const(0.1), Angle.weight(0), Angle.const(0.3)))
    assert t.ops[1] == Op("crx", (1, 0), (Angle.weight(0, 2.0),))


def test_builder_symbols_from_repeated_calls_are_indexed_globally():
    c = Circuit(1)
    a = c.weights("a", 2)
    b = c.weights("b", 1)
    assert [s.index for s in a + b] == [0, 1, 2]
    c.rx(a[0], 0).rx(a[1], 0).rx(b[0], 0)
    assert c.build().weight_names == ("a[0]", "a[1]", "b[0]")


def test_builder_unknown_gate():
    c = Circuit(1)
    with pytest.raises(CircuitError, match=r"unknown gate 'foo'; known gates: .*\bry\b"):
        c.gate("foo", [0])
    with pytest.raises(AttributeError):
        c.foo(0)


def test_builder_two_symbol_sum_is_refused():
    c = Circuit(1)
    x = c.inputs("x", 1)
    w = c.weights("w", 1)
    with pytest.raises(CircuitError, match="an angle may depend on one symbol only"):
        x[0] + w[0]
    with pytest.raises(CircuitError, match="one symbol only"):
        (2 * x[0] + 1) + w[0]


def test_builder_two_symbol_difference_is_refused_clearly():
    c = Circuit(1)
    x = c.inputs("x", 1)
    w = c.weights("w", 1)
    with pytest.raises(CircuitError, match="one symbol only"):
        x[0] - w[0]


def test_builder_constant_minus_symbol():
    c = Circuit(1)
    x = c.inputs("x", 1)
    s = np.pi - x[0]
    assert s.angle() == Angle("input", 0, -1.0, np.pi)


def test_builder_build_checks_template():
    c = Circuit(2)
    c.gate("rx", [0])  # missing angle
    with pytest.raises(CircuitError, match=r"op 0 \(rx\): takes 1 angle\(s\), got 0"):
        c.build()
    c = Circuit(1)
    c.h(0)
    with pytest.raises(CircuitError, match=r"acts on qubit\(s\) \[1\]"):
        c.build(observables=["Z1"])
    c = Circuit(1)
    c.inputs("x", 1)
    c.h(0)
    with pytest.raises(CircuitError, match=r"extra input parameter\(s\) \['x\[0\]'\]"):
        c.build()


# --- gate table -----------------------------------------------------------------


def test_every_gate_is_unitary_for_random_angles():
    rng = np.random.default_rng(0)
    for name, spec in GATES.items():
        B = 5
        angles = rng.uniform(-2 * np.pi, 2 * np.pi, size=(B, spec.num_params))
        mats = gate_matrix(name, angles)
        d = 2**spec.num_wires
        assert mats.shape == ((B if spec.num_params else 1), d, d), name
        assert mats.dtype == complex
        for u in mats:
            np.testing.assert_allclose(u.conj().T @ u, np.eye(d), atol=1e-12, err_msg=name)
            if spec.diagonal:
                np.testing.assert_allclose(u, np.diag(np.diag(u)), atol=1e-15, err_msg=name)


def test_gate_batching_is_per_row():
    rng = np.random.default_rng(1)
    for name, spec in GATES.items():
        if not spec.num_params:
            continue
        angles = rng.uniform(-3, 3, size=(4, spec.num_params))
        batched = gate_matrix(name, angles)
        for b in range(4):
            np.testing.assert_allclose(batched[b], m(name, *angles[b]), atol=1e-15)


def test_fixed_gates_from_first_principles():
    h = np.array([[1, 1], [1, -1]]) / np.sqrt(2)
    np.testing.assert_allclose(m("id"), I2)
    np.testing.assert_allclose(m("h"), h)
    np.testing.assert_allclose(m("x"), X)
    np.testing.assert_allclose(m("y"), Y)
    np.testing.assert_allclose(m("z"), Z)
    np.testing.assert_allclose(m("s"), np.diag([1, 1j]))
    np.testing.assert_allclose(m("sdg"), np.diag([1, -1j]))
    np.testing.assert_allclose(m("t"), np.diag([1, np.exp(1j * np.pi / 4)]))
    np.testing.assert_allclose(m("tdg"), np.diag([1, np.exp(-1j * np.pi / 4)]))
    np.testing.assert_allclose(m("sx") @ m("sx"), X, atol=1e-15)
    np.testing.assert_allclose(m("sxdg") @ m("sx"), I2, atol=1e-15)
    # sx = e^{i pi/4} rx(pi/2)
    np.testing.assert_allclose(m("sx"), np.exp(1j * np.pi / 4) * m("rx", np.pi / 2), atol=1e-15)
    # two-qubit: first wire is the most significant bit
    np.testing.assert_allclose(m("cx"), np.kron(P0, I2) + np.kron(P1, X))
    np.testing.assert_allclose(m("cy"), np.kron(P0, I2) + np.kron(P1, Y))
    np.testing.assert_allclose(m("cz"), np.diag([1, 1, 1, -1]))
    basis = np.eye(4)
    # cx on (control, target): |10> -> |11>, |11> -> |10>, |0x> unchanged
    assert np.allclose(m("cx") @ basis[2], basis[3]) and np.allclose(m("cx") @ basis[1], basis[1])
    np.testing.assert_allclose(m("swap") @ basis[1], basis[2])
    ccx = np.eye(8)
    ccx[[6, 7]] = ccx[[7, 6]]
    np.testing.assert_allclose(m("ccx"), ccx)
    cswap = np.eye(8)
    cswap[[5, 6]] = cswap[[6, 5]]  # |101> <-> |110>
    np.testing.assert_allclose(m("cswap"), cswap)


@pytest.mark.parametrize("t", [0.0, 0.37, -1.2, np.pi, 2.9, 5.5])
def test_parametrized_gates_from_first_principles(t):
    np.testing.assert_allclose(m("rx", t), expm(-1j * t / 2 * X), atol=1e-12)
    np.testing.assert_allclose(m("ry", t), expm(-1j * t / 2 * Y), atol=1e-12)
    np.testing.assert_allclose(m("rz", t), expm(-1j * t / 2 * Z), atol=1e-12)
    np.testing.assert_allclose(m("p", t), np.diag([1, np.exp(1j * t)]), atol=1e-12)
    # p and rz differ by a global phase only
    np.testing.assert_allclose(m("p", t), np.exp(1j * t / 2) * m("rz", t), atol=1e-12)
    np.testing.assert_allclose(m("rxx", t), expm(-1j * t / 2 * np.kron(X, X)), atol=1e-12)
    np.testing.assert_allclose(m("ryy", t), expm(-1j * t / 2 * np.kron(Y, Y)), atol=1e-12)
    np.testing.assert_allclose(m("rzz", t), expm(-1j * t / 2 * np.kron(Z, Z)), atol=1e-12)
    np.testing.assert_allclose(m("crx", t), np.kron(P0, I2) + np.kron(P1, expm(-1j * t / 2 * X)), atol=1e-12)
    np.testing.assert_allclose(m("cry", t), np.kron(P0, I2) + np.kron(P1, expm(-1j * t / 2 * Y)), atol=1e-12)
    np.testing.assert_allclose(m("crz", t), np.kron(P0, I2) + np.kron(P1, expm(-1j * t / 2 * Z)), atol=1e-12)
    np.testing.assert_allclose(m("cp", t), np.kron(P0, I2) + np.kron(P1, np.diag([1, np.exp(1j * t)])), atol=1e-12)
    np.testing.assert_allclose(m("cp", t), np.diag([1, 1, 1, np.exp(1j * t)]), atol=1e-12)
    np.testing.assert_allclose(m("u", t, 0, 0), m("ry", t), atol=1e-12)


def test_u_gate_decomposition():
    rng = np.random.default_rng(3)
    for theta, phi, lam in rng.uniform(-np.pi, np.pi, size=(6, 3)):
        expected = np.exp(1j * (phi + lam) / 2) * m("rz", phi) @ m("ry", theta) @ m("rz", lam)
        np.testing.assert_allclose(m("u", theta, phi, lam), expected, atol=1e-12)
    # u(pi/2, 0, pi) is the Hadamard
    np.testing.assert_allclose(m("u", np.pi / 2, 0, np.pi), m("h"), atol=1e-12)


def test_every_parametrized_gate_has_a_shift_rule():
    for name, spec in GATES.items():
        if spec.num_params:
            assert spec.shift_rule in SHIFT_RULES, name
        else:
            assert spec.shift_rule is None, name


def _random_state_and_observable(rng, k):
    d = 2**k
    psi = rng.normal(size=d) + 1j * rng.normal(size=d)
    psi /= np.linalg.norm(psi)
    a = rng.normal(size=(d, d)) + 1j * rng.normal(size=(d, d))
    return psi, a + a.conj().T


def test_shift_rules_give_exact_derivatives_for_every_gate():
    """f(t) = <psi|U(t)^dag O U(t)|psi>; the gate's rule must equal df/dt (central differences)."""
    rng = np.random.default_rng(11)
    for name, spec in GATES.items():
        if not spec.num_params:
            continue
        rule = SHIFT_RULES[spec.shift_rule]
        for _ in range(3):
            psi, obs = _random_state_and_observable(rng, spec.num_wires)
            base = rng.uniform(-np.pi, np.pi, size=spec.num_params)
            for k in range(spec.num_params):

                def f(t):
                    a = base.copy()
                    a[k] = t
                    phi = m(name, *a) @ psi
                    return float(np.real(phi.conj() @ obs @ phi))

                t0, eps = base[k], 1e-6
                fd = (f(t0 + eps) - f(t0 - eps)) / (2 * eps)
                ps = sum(c * (f(t0 + s) - f(t0 - s)) for c, s in rule)
                assert ps == pytest.approx(fd, abs=1e-6), (name, k)


def test_four_term_rule_on_half_and_unit_frequencies():
    rng = np.random.default_rng(5)
    for _ in range(5):
        a, b, c1, c2 = rng.normal(size=4)

        def f(t):
            return a * np.cos(t / 2 + c1) + b * np.sin(t + c2)

        t0 = rng.uniform(-3, 3)
        exact = -a / 2 * np.sin(t0 / 2 + c1) + b * np.cos(t0 + c2)
        ps = sum(c * (f(t0 + s) - f(t0 - s)) for c, s in SHIFT_RULES["four-term"])
        assert ps == pytest.approx(exact, abs=1e-12)
        # and the two-term rule is wrong for the half frequency (the test can tell them apart)
        two = sum(c * (f(t0 + s) - f(t0 - s)) for c, s in SHIFT_RULES["two-term"])
        if abs(a) > 0.1:
            assert two != pytest.approx(exact, abs=1e-6)


# ----------------------------------------------------------------------- hardening (issue 14)


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: Circuit(2).rx(0.3, 1.5), r"wire 1.5 is not an integer \(the arguments are rx\(angle, wire\)\)"),
        (lambda: Circuit(2).rx(0, 0.7), r"wire 0.7 is not an integer"),
        (lambda: Circuit(2).rx(float("nan"), 0), r"angle nan is not finite"),
        (lambda: (lambda c: c.rx(float("inf") * c.inputs("x", 1)[0], 0))(Circuit(1)), r"is not finite"),
        (lambda: Circuit(1).rx("a", 0), r"angle 'a' is not a number"),
        (lambda: Circuit(1).rx(0.1, 0).build([[(float("nan"), "Z0")]]), r"coefficient nan is not finite"),
        (lambda: Circuit(1).rx(0.1, 0).build(["Z" + "1" * 5000]), r"more than 9 digits"),
    ],
)
def test_bad_builder_arguments_are_one_line_errors(build, message):
    with pytest.raises(CircuitError, match=message) as info:
        build()
    assert "\n" not in str(info.value) and len(str(info.value)) < 400


def test_a_pauli_term_on_many_wires_is_checked_quickly_and_reported_briefly():
    import time

    start = time.perf_counter()
    with pytest.raises(CircuitError, match=r"acts on qubit\(s\) \[1, 2, 3, 4, 5, \.\.\. 59994 more\]") as info:
        Circuit(1).rx(0.1, 0).build([" ".join(f"Z{i}" for i in range(60000))])
    assert time.perf_counter() - start < 5 and len(str(info.value)) < 400


def test_template_problems_escape_control_characters_in_names():
    t = CircuitTemplate(0, (), name="evil\n\x1b[2K\u202e")
    (problem,) = t.problems()
    assert "\n" not in problem and "\x1b" not in problem and "\u202e" not in problem


# ----------------------------------------------------------------------- hostile numbers and text (issue 22.8, 22.9)


def _one_clean_line(exc) -> str:
    text = str(exc)
    assert "\n" not in text
    text.encode("utf-8")  # printable: no lone surrogate
    return text


def _with_x(build):
    """``build(circuit, x)`` on a 3-qubit circuit with one input ``x``."""
    c = Circuit(3)
    return build(c, c.inputs("x", 1)[0])


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: Circuit(3).ry(10**400, 0), r"gate 'ry' on wire\(s\) \[0\]: angle \(an integer of 401 digits\) is "
                                            r"past a float's range"),
        (lambda: Circuit(1).rx(-(10**5000), 0), r"angle \(a negative integer of 5001 digits\) is past"),
        (lambda: Circuit(1).rx(0.1, 10**5000).build(), r"wire\(s\) \[\(an integer of 5001 digits\)\] outside"),
        (lambda: _with_x(lambda c, x: c.ry(x * 10**400, 0)), r"factor \(an integer of 401 digits\) is past"),
        (lambda: _with_x(lambda c, x: c.ry(10**400 * x, 0)), r"factor \(an integer of 401 digits\) is past"),
        (lambda: _with_x(lambda c, x: c.ry(x + 10**400, 0)), r"term \(an integer of 401 digits\) is past"),
        (lambda: _with_x(lambda c, x: c.ry(10**400 - x, 0)), r"term \(an integer of 401 digits\) is past"),
        (lambda: _with_x(lambda c, x: c.ry(x - 10**400, 0)), r"term \(an integer of 401 digits\) is past"),
        (lambda: _with_x(lambda c, x: c.ry(x / 10**400, 0)), r"divisor \(an integer of 401 digits\) is past"),
        (lambda: _with_x(lambda c, x: c.ry(x / 0, 0)), r"angle expression: division by 0"),
        (lambda: _with_x(lambda c, x: c.ry(x * "2", 0)), r"factor '2' is not a real number"),
        (lambda: _with_x(lambda c, x: c.ry(x, 0).build([[(10**400, "Z0")]])),
         r"coefficient \(an integer of 401 digits\) is past a float's range"),
        (lambda: _with_x(lambda c, x: c.ry(x, 0).build(["Z0"], shots=10**400)),
         r"shots \(an integer of 401 digits\) are more than any backend takes \(at most 2\*\*63 - 1"),
        (lambda: _with_x(lambda c, x: c.ry(x, 0).build(["Z0"], shots=2**63)), r"shots 9223372036854775808 are more"),
        (lambda: _with_x(lambda c, x: c.ry(x, 0).build(["Z0"], shots=True)), r"shots must be a positive integer"),
        (lambda: Circuit(3).inputs("x", 10**400), r"n must be an integer from 0 to 1,048,576, got \(an integer of 401"),
        (lambda: Circuit(3).weights("w", 2.5), r"n must be an integer from 0 to 1,048,576, got 2.5"),
        (lambda: Circuit(3).gate(["rx"], [0]), r"unknown gate \['rx'\]"),
        (lambda: Angle.const(10**400), r"angle \(an integer of 401 digits\) is past"),
        (lambda: Angle.input(0, 10**400), r"angle scale \(an integer of 401 digits\) is past"),
        (lambda: PauliTerm.parse("Z0", 10**400), r"coefficient \(an integer of 401 digits\) is past"),
    ],
)
def test_huge_numbers_in_the_builder_are_one_line_circuit_errors(build, message):
    with pytest.raises(CircuitError, match=message) as info:
        build()
    assert len(_one_clean_line(info.value)) < 400


def test_the_largest_shots_a_generator_takes_are_accepted():
    t = _with_x(lambda c, x: c.ry(x, 0).build(["Z0"], shots=2**63 - 1))
    assert t.shots == 2**63 - 1 and str(t).startswith("CircuitTemplate 'circuit': 3 qubits")


def test_a_template_built_directly_with_huge_integers_lists_them_as_problems():
    t = CircuitTemplate(2, (Op("rx", (0,), (Angle("const", -1, 0.0, 10**400),)),
                            Op("ry", (10**5000,), (Angle("input", 10**400, 1.0, 0.0),))),
                        observables=(Observable((PauliTerm(10**400, ((0, "Z"),)),)),), shots=-(10**5000))
    text = _one_clean_line("; ".join(t.problems()))
    assert "op 0 (rx): angle Angle(kind='const', index=-1, scale=0.0, offset=1000" in text
    assert "op 1 (ry): wire(s) [(an integer of 5001 digits)] outside the circuit's 2 qubits" in text
    assert "unbound parameter (input #(an integer of 401 digits)) is not declared" in text
    assert "observable 0 ((an integer of 401 digits)*Z0) has a coefficient that is not finite" in text
    assert "shots must be a positive integer or None, got (a negative integer of 5001 digits)" in text
    assert CircuitTemplate(10**5000, ()).problems() == [  # past the cap (issue 34, item 19), said without its digits
        "circuit 'circuit': n_qubits must be at most 10,000 (hqflow.ir.circuit.MAX_QUBITS), got (an integer of 5001 "
        "digits)"]
    assert str(CircuitTemplate(10**5000, ())).startswith("CircuitTemplate 'circuit': (an integer of 5001 digits) qubits")


@pytest.mark.parametrize("build, what", [
    (lambda: Circuit(1, name="c\ud800").rx(0.1, 0).build(), "name 'c\\\\ud800'"),
    (lambda: (lambda c: c.rx(c.inputs("\ud800", 2)[0], 0).rx(c.inputs("\ud800", 2)[1], 0).build())(Circuit(1)),
     "input name '\\\\ud800\\[0\\]' \\(and 3 more\\)"),
    (lambda: (lambda c: c.rx(c.weights("w\udcff", 1)[0], 0).build())(Circuit(1)), "weight name 'w\\\\udcff\\[0\\]'"),
    (lambda: CircuitTemplate(1, (), input_names=(5,)).check(), "input name 5 is not a string"),
])
def test_names_that_no_output_can_write_are_refused_in_one_line(build, what):
    with pytest.raises(CircuitError, match=what) as info:
        build()
    text = _one_clean_line(info.value)
    assert "not a string" in text or "is not Unicode text (it holds a lone surrogate" in text


def test_an_observable_with_a_lone_surrogate_is_refused_in_one_line():
    with pytest.raises(CircuitError, match="cannot parse Pauli term") as info:
        Circuit(1).rx(0.1, 0).build(["Z0 \ud800"])
    _one_clean_line(info.value)
