"""QAOA MaxCut: the workload beats 0.9 of the max cut at p >= 2; its pieces are checked on their own."""
import networkx as nx
import numpy as np
import pytest

from hqflow.backends import CircuitBatch, get_backend
from hqflow.gradients import finite_difference, param_shift
from hqflow.ir import Graph
from hqflow.workloads import get_workload, qaoa


def test_brute_force_max_cut():
    k33 = nx.complete_bipartite_graph(3, 3)
    assert qaoa.brute_force_max_cut(6, list(k33.edges)) == 9
    triangle = [(0, 1), (1, 2), (0, 2)]
    assert qaoa.brute_force_max_cut(3, triangle) == 2
    assert qaoa.cut_size("011", triangle) == 2


def test_cost_observable_is_the_cut():
    """On a computational basis state, <C> is the cut size of that bitstring."""
    edges = [(0, 1), (1, 2), (2, 3), (0, 3), (0, 2)]
    template = qaoa.qaoa_circuit(4, edges, 1)
    obs = template.observables[0]
    for b in range(16):
        bits = format(b, "04b")
        z = [1 - 2 * int(c) for c in bits]
        value = sum(t.coeff * np.prod([z[w] for w in t.wires]) for t in obs.terms)
        assert value == pytest.approx(qaoa.cut_size(bits, edges))


def test_param_shift_gradient_matches_finite_differences():
    cfg = qaoa.Config(nodes=6, layers=2)
    edges = list(qaoa.make_graph(cfg).edges)
    template = qaoa.qaoa_circuit(6, edges, 2)
    backend = get_backend("reference")
    w = np.array([0.4, 0.9, 0.6, 0.2])

    def cut(weights):
        return backend.submit(CircuitBatch.make(template, None, weights)).result().values

    batch, post = param_shift(template, None, w)
    jac = post(backend.submit(batch).result())[1]
    np.testing.assert_allclose(jac, finite_difference(cut, w), atol=1e-6)
    assert np.abs(jac).max() > 1e-2


@pytest.mark.parametrize("nodes, layers", [(6, 2), (6, 3), (8, 4)])
def test_qaoa_reaches_ratio(nodes, layers):
    cfg = get_workload("qaoa").Config(nodes=nodes, layers=layers, seed=0)
    result = qaoa.run(cfg)
    assert result["approximation_ratio"] >= 0.9
    assert result["history"][-1] > result["history"][0]  # training improved <C>
    assert result["best_cut"] == result["max_cut"]  # the samples contain an optimal cut
    edges = result["edges"]
    assert qaoa.cut_size(result["best_bits"], edges) == result["best_cut"]
    assert len(result["most_likely"]) == nodes


def test_graph_json_round_trip():
    qiskit_io = pytest.importorskip("hqflow.ir.qiskit_io", reason="graph JSON needs hqflow.ir.qiskit_io")
    if not hasattr(qiskit_io, "template_to_qpy"):
        pytest.skip("hqflow.ir.qiskit_io has no template_to_qpy")
    cfg = qaoa.Config(nodes=6)
    for graph in (qaoa.build_graph(cfg), qaoa.build_sample_graph(cfg)):
        again = Graph.from_json(graph.to_json()).validate()
        assert again == graph
