"""VQE on H2: the workload reaches chemical accuracy; its pieces are checked on their own."""
import dataclasses

import numpy as np
import pytest

from hqflow.backends import CircuitBatch, get_backend
from hqflow.backends.reference import apply_matrix
from hqflow.gradients import finite_difference, param_shift
from hqflow.ir import Circuit, Graph, gate_matrix
from hqflow.workloads import get_workload, vqe


def unitary(template, weights):
    """The full matrix of a template (wire 0 most significant), column b = U|b>."""
    n = template.n_qubits
    state = np.eye(2**n, dtype=complex).reshape((2**n,) + (2,) * n)
    for op, angles in zip(template.ops, CircuitBatch.make(template, None, weights).angles()):
        state = apply_matrix(state, gate_matrix(op.name, angles), op.wires)
    return state.reshape(2**n, 2**n).T


@pytest.mark.parametrize("theta", [0.0, 0.37, -2.1])
def test_double_excitation_matches_pennylane(theta):
    qml = pytest.importorskip("pennylane")
    c = Circuit(4)
    (w,) = c.weights("theta", 1)
    template = vqe.double_excitation(c, w).build()
    expected = qml.matrix(qml.DoubleExcitation(theta, wires=[0, 1, 2, 3]), wire_order=[0, 1, 2, 3])
    np.testing.assert_allclose(unitary(template, [theta]), expected, atol=1e-12)


def test_hamiltonian_is_h2_sto3g():
    observable, exact, hf = vqe.hamiltonian(0.735)
    assert exact == pytest.approx(-1.13730604, abs=1e-6)  # FCI / STO-3G at 0.735 A
    assert hf == pytest.approx(-1.11699900, abs=1e-6)
    assert len(observable.terms) == 15 and observable.wires == (0, 1, 2, 3)
    assert vqe.hamiltonian(0.735) is vqe.hamiltonian(0.735)  # cached


def test_param_shift_gradient_matches_finite_differences():
    observable, _, _ = vqe.hamiltonian(0.735)
    template = vqe.ansatz(observable)
    backend = get_backend("reference")

    def energy(w):
        return backend.submit(CircuitBatch.make(template, None, w)).result().values

    batch, post = param_shift(template, None, [0.3])
    jac = post(backend.submit(batch).result())[1]
    np.testing.assert_allclose(jac, finite_difference(energy, np.array([0.3])), atol=1e-7)
    assert abs(jac[0, 0, 0]) > 1e-3  # not trivially zero


def test_vqe_reaches_chemical_accuracy():
    cfg = get_workload("vqe").Config()
    result = vqe.run(cfg)
    assert 0.0 <= result["error_mha"] < 1.6
    assert result["energy"] < result["hf_energy"]
    assert len(result["history"]) == cfg.steps
    assert result["history"][0] == pytest.approx(result["hf_energy"], abs=1e-6)  # starts at Hartree-Fock (complex64 backend)
    same = vqe.run(dataclasses.replace(cfg, steps=5))
    assert same["history"] == result["history"][:5]  # deterministic


def test_graph_json_round_trip():
    qiskit_io = pytest.importorskip("hqflow.ir.qiskit_io", reason="graph JSON needs hqflow.ir.qiskit_io")
    if not hasattr(qiskit_io, "template_to_qpy"):
        pytest.skip("hqflow.ir.qiskit_io has no template_to_qpy")
    graph = vqe.build_graph(vqe.Config())
    again = Graph.from_json(graph.to_json()).validate()
    assert again == graph
