"""Azure payloads, results and prices, checked without a service: against the SDK's own
translators, the reference simulator and the published formulas."""
import json
import math

import numpy as np
import pytest

pytest.importorskip("azure.quantum", reason="needs the azure extra: pip install 'hqflow[azure]'")

from hqflow.backends import CircuitBatch, get_backend  # noqa: E402
from hqflow.backends.azure import translate as T  # noqa: E402
from hqflow.backends.azure.cost import gate_counts, job_cost, price_entry  # noqa: E402
from hqflow.backends.azure.results import OutputError, counts_of, estimate  # noqa: E402
from hqflow.backends.reference import probabilities, simulate  # noqa: E402
from hqflow.ir.circuit import CircuitTemplate, Op  # noqa: E402
from hqflow.ir.random import random_template  # noqa: E402


def _cases(n, seed=20261123):
    rng = np.random.default_rng(seed)
    for k in range(n):
        t = random_template(rng, int(rng.integers(1, 5)), n_ops=int(rng.integers(4, 25)))
        x = rng.uniform(-np.pi, np.pi, (3, t.n_inputs))
        w = rng.uniform(-np.pi, np.pi, (t.n_weights,))
        yield k, t, CircuitBatch.make(t, x, w, shots=1000, seed=k)


def _measured_template(p: T.Payloads, group: dict) -> CircuitTemplate:
    """The lowered circuit of one measurement group, as hqflow ops (basis rotations included)."""
    ops = list(p.ops)
    for w in sorted(group):
        if group[w] == "X":
            ops.append(Op("h", (w,)))
        elif group[w] == "Y":
            ops += [Op("sdg", (w,)), Op("h", (w,))]
    t = p.template
    return CircuitTemplate(t.n_qubits, tuple(ops), t.input_names, t.weight_names, name=t.name)


@pytest.mark.parametrize("kind", ["ionq", "qasm", "qir"])
def test_slotted_payloads_equal_the_sdk_translation_row_by_row(kind):
    for k, t, batch in _cases(6 if kind == "qir" else 15):
        p = T.Payloads(t, T.FORMATS[kind])
        assert not p.per_row, f"case {k}: the fast path did not verify for {kind}: {t}"
        rows, vals = p.rows(batch), p.values(batch)
        for r in range(batch.size):
            for g, group in enumerate(p.groups):
                sdk = p.translate(group, vals[r])
                assert T._canon(rows[r][g].decode(), kind == "qir") == T._canon(sdk, kind == "qir"), f"case {k}"


def test_lowering_keeps_every_circuit_up_to_global_phase():
    gates = set()
    for k, t, batch in _cases(40, seed=7):
        gates |= {op.name for op in t.ops}
        p = T.Payloads(t, T.FORMATS["ionq"])
        low = _measured_template(p, {})
        want = probabilities(simulate(CircuitBatch.make(t, batch.inputs, batch.weights)))
        got = probabilities(simulate(CircuitBatch.make(low, batch.inputs, batch.weights)))
        np.testing.assert_allclose(got, want, atol=1e-9, err_msg=f"case {k}: {t}")
    assert {"u", "crx", "cry", "crz", "cp", "cswap", "cy", "p", "sx"} <= gates


def test_groups_are_qubit_wise_commuting_and_cover_every_term():
    for k, t, _ in _cases(30, seed=3):
        groups = T.measurement_groups(t)
        for obs in t.observables:
            for term in obs.terms:
                if term.paulis:
                    g = groups[T.group_of(groups, term.paulis)]
                    assert all(g[w] == p for w, p in term.paulis)
        assert len(groups) <= sum(len(o.terms) for o in t.observables) or groups == [{}]


def test_values_from_counts_are_within_five_sigma_of_exact(sampled):
    """Basis rotations, grouping and estimates: sample each group's rotated circuit, then compare, each Pauli term
    by its exact binomial tail; each Pauli sum is its terms' coefficients times their values, from the same counts."""
    ref = get_backend("reference")
    for k, whole, batch in _cases(12, seed=11):
        t, mix = sampled.terms(whole)
        exact = ref.run_checked(CircuitBatch.make(t, batch.inputs, batch.weights)).values
        p = T.Payloads(t, T.FORMATS["ionq"])
        assert p.groups == T.measurement_groups(whole)
        rng = np.random.default_rng(k)
        for r in range(batch.size):
            counts = []
            for group in p.groups:
                low = _measured_template(p, group)
                probs = probabilities(simulate(CircuitBatch.make(low, batch.inputs[r:r + 1], batch.weights)))[0]
                hist = {str(sum(((i >> (t.n_qubits - 1 - q)) & 1) << q for q in range(t.n_qubits))): float(pr)
                        for i, pr in enumerate(probs) if pr > 0}  # IonQ order: qubit 0 least significant
                counts.append(counts_of(T.FORMATS["ionq"], {"histogram": hist}, t.n_qubits, 4000, rng, True))
            vals, _ = estimate(t, p.groups, counts)
            assert sampled.within(vals, exact[r], 4000) == 1.0, f"case {k} row {r}: {vals} vs {exact[r]}"
            np.testing.assert_allclose(estimate(whole, p.groups, counts)[0], mix @ vals, atol=1e-12)


def test_outputs_of_each_format_read_in_wire_order():
    rng = np.random.default_rng(0)
    ionq = counts_of(T.FORMATS["ionq"], json.dumps({"histogram": {"1": 0.25, "2": 0.75}}), 2, 100, rng, False)
    assert ionq == {"10": 25, "01": 75}  # integer 1: qubit 0 set
    qasm = counts_of(T.FORMATS["qasm"], {"c": ["01", "01", "10"]}, 2, 3, rng, False)
    assert qasm == {"10": 2, "01": 1}  # classical bit 0 rightmost
    qir = counts_of(T.FORMATS["qir"], {"DataFormat": "microsoft.quantum-results.v2",
                                       "Results": [{"Shots": [[0, 1], [0, 1], [1, 0]]}]}, 2, 3, rng, False)
    assert qir == {"10": 2, "01": 1}  # recorded from the last bit to the first, as Qiskit's QIR does
    with pytest.raises(OutputError, match="does not sum to 1"):
        counts_of(T.FORMATS["ionq"], {"histogram": {"0": 0.5}}, 1, 10, rng, False)
    with pytest.raises(OutputError, match="cannot read"):
        counts_of(T.FORMATS["qasm"], {"d": []}, 1, 10, rng, False)


def test_probabilities_are_sampled_from_the_seed():
    fmt, hist = T.FORMATS["ionq"], {"histogram": {"0": 0.5, "1": 0.5}}
    a = counts_of(fmt, hist, 1, 1001, np.random.default_rng(5), True)
    b = counts_of(fmt, hist, 1, 1001, np.random.default_rng(5), True)
    assert a == b and sum(a.values()) == 1001 and a.get("0", 0) != 500.5


def _qc(n1, n2, n3=0):
    from qiskit import QuantumCircuit

    qc = QuantumCircuit(3, 3)
    for _ in range(n1):
        qc.rx(0.3, 0)
    for _ in range(n2):
        qc.cx(0, 1)
    for _ in range(n3):
        qc.ccx(0, 1, 2)
    qc.measure(range(3), range(3))
    return qc


def test_prices_follow_the_published_formulas():
    aria = price_entry("ionq.qpu.aria-1")
    counts = gate_counts(_qc(10, 4, 1), "ionq")
    assert counts == (10, 4 + 6, 3)  # a 3-qubit gate bills as 6 two-qubit gates
    assert (aria["price_1q"], aria["price_2q"]) == (0.00022, 0.000975)  # Azure's pricing page
    assert job_cost(aria, "ionq.qpu.aria-1", counts, 100000) == pytest.approx(
        100000 * (0.00022 * 10 + 0.000975 * 10))
    assert job_cost(aria, "ionq.qpu.aria-1", counts, 10) == 97.5  # the per-job minimum
    h2 = price_entry("quantinuum.qpu.h2-1")
    counts = gate_counts(_qc(7, 3, 1), "hqc")
    assert counts == (7, 4, 3)
    assert job_cost(h2, "quantinuum.qpu.h2-1", counts, 500) == pytest.approx(5 + 500 * (7 + 10 * 4 + 5 * 3) / 5000)
    assert job_cost(price_entry("quantinuum.sim.h2-1sc"), "quantinuum.sim.h2-1sc", counts, 500) == 0.0
    assert job_cost(price_entry("ionq.simulator"), "ionq.simulator", counts, 500) == 0.0


def test_estimate_cost_counts_every_row_and_group_without_a_workspace():
    t = random_template(np.random.default_rng(2), 3, n_ops=12)
    b = get_backend("azure:ionq.qpu.aria-1")  # no workspace needed to price a batch
    batch = CircuitBatch.make(t, np.zeros((5, t.n_inputs)), np.zeros(t.n_weights), shots=2000)
    cost = b.estimate_cost(batch)
    groups = len(T.measurement_groups(t))
    assert cost.jobs == 5 * groups and cost.currency == "USD" and cost.shots == 2000
    per_row = 0.0
    for g in T.Payloads(t, T.FORMATS["ionq"]).groups:
        qc = T.Payloads(t, T.FORMATS["ionq"])._qiskit(g, np.full(99, 0.5))
        n1 = sum(1 for i in qc.data if i.operation.num_qubits == 1 and i.operation.name != "measure")
        n2 = sum(1 if i.operation.num_qubits == 2 else 6 * (i.operation.num_qubits - 2)
                 for i in qc.data if i.operation.num_qubits > 1)
        per_row += max(2000 * (0.00022 * n1 + 0.000975 * n2), 97.5)
    assert math.isclose(cost.amount, 5 * per_row)
    assert "key" not in repr(b) and b.capabilities.max_qubits == 25 and not b.capabilities.exact


def test_other_shapes_of_output_that_services_return():
    rng = np.random.default_rng(0)
    ionq, qir = T.FORMATS["ionq"], T.FORMATS["qir"]
    # a histogram of counts rather than probabilities
    assert counts_of(ionq, {"histogram": {"1": 30, "2": 70}}, 2, 100, rng, True) == {"10": 30, "01": 70}
    # QIR v2 without per-shot results: the histogram's counts (qiskit's order: bit n-1 first)
    v2 = {"DataFormat": "microsoft.quantum-results.v2", "Results": [{"Histogram": [
        {"Outcome": [0, 1], "Display": "[0, 1]", "Count": 3}, {"Outcome": [1, 1], "Display": "[1, 1]", "Count": 1}]}]}
    assert counts_of(qir, v2, 2, 4, rng, False) == {"10": 3, "11": 1}
    # the older v1 histogram of probabilities, sampled into the shots
    v1 = {"Histogram": ["[0, 1]", 0.5, "[1, 0]", 0.5]}
    got = counts_of(qir, v1, 2, 1000, rng, True)
    assert set(got) == {"10", "01"} and sum(got.values()) == 1000 and min(got.values()) > 400
    # shots with a lost qubit are dropped, as the SDK drops them
    lossy = {"Results": [{"Shots": [[0, 1], [2, 1], "[1, -]", [1, 1]]}]}
    assert counts_of(qir, lossy, 2, 4, rng, False) == {"10": 1, "11": 1}
    with pytest.raises(OutputError, match="every qubit present"):
        counts_of(qir, {"Results": [{"Shots": [[2, 1]]}]}, 2, 1, rng, False)
    with pytest.raises(OutputError, match="expected 2 bits"):
        counts_of(qir, {"Results": [{"Shots": [[0, 1, 1]]}]}, 2, 1, rng, False)
    with pytest.raises(OutputError, match="negative"):
        counts_of(ionq, {"histogram": {"0": -0.5, "1": 1.5}}, 1, 10, rng, False)


def test_the_output_blob_of_a_job_whose_service_names_none():
    from hqflow.backends.azure.backend import _output_blob

    assert _output_blob("https://acct/blob/job-1?sv=1&sig=x") == "https://acct/blob/job-1/rawOutputData?sv=1&sig=x"
    assert _output_blob("http://127.0.0.1:1/acct/job-2/") == "http://127.0.0.1:1/acct/job-2/rawOutputData"
