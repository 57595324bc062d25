"""Rows that share a circuit (issue 35, item 2): k rows of a batch as one circuit on disjoint registers, each row
read from its register's marginal (``hqflow.backends.share``). Differential at the reference simulator, then
the emulated QPU's usage, price and values, and the ``share`` option's refusals. Azure's, through the real SDK and
the loopback service: tests/backends/azure/test_share_service.py."""
import importlib.util
import math

import numpy as np
import pytest

from hqflow.backends import BackendError, CircuitBatch, JobCancelled, JobFailed, RequestRefused, get_backend
from hqflow.backends import share
from hqflow.backends.reference import ReferenceBackend
from hqflow.cli import main
from hqflow.ir import Circuit
from hqflow.ir.random import random_template

REF = ReferenceBackend()


def _alone_and_shared(batch, k):
    """The batch run row by row (as one batch) and as shared circuits, both at the reference."""
    parts = share.widen(batch, k)
    return REF.run_checked(batch), share.narrow(batch, k, [REF.run_checked(p) for p in parts]), parts


@pytest.mark.parametrize("n, k, rows, per_row, seed", [(2, 3, 7, False, 0), (3, 2, 5, True, 1), (2, 4, 9, True, 2),
                                                       (1, 5, 11, False, 6), (3, 3, 6, False, 4), (2, 5, 3, True, 5)])
def test_shared_rows_equal_the_rows_alone_at_the_reference(n, k, rows, per_row, seed):
    rng = np.random.default_rng(seed)
    t = random_template(rng, n, n_observables=3)  # up to 3 Pauli terms each, X/Y/Z: several measurement groups
    x = rng.uniform(-2, 2, (rows, t.n_inputs))
    w = rng.uniform(-2, 2, (rows, t.n_weights) if per_row else t.n_weights)
    alone, shared, parts = _alone_and_shared(CircuitBatch.make(t, x, w), k)
    assert [p.size for p in parts] == [r for r, _ in share.layout(rows, k)]  # ⌊B / k⌋ of k, then one of B mod k
    assert [p.template.n_qubits for p in parts] == [n * m for _, m in share.layout(rows, k)]
    assert sum(p.size for p in parts) == share.circuits(rows, k) == math.ceil(rows / k)
    assert shared.values.shape == (rows, 3)
    np.testing.assert_allclose(shared.values, alone.values, rtol=0, atol=1e-12)
    assert np.ptp(alone.values, axis=0).max() > 1e-3  # rows differ: one read from the wrong register would show
    probs = CircuitBatch.make(t.with_observables([]), x, w)  # sampled circuits: each register's marginal
    alone, shared, _ = _alone_and_shared(probs, k)
    assert shared.probs.shape == (rows, 2**n)
    np.testing.assert_allclose(shared.probs, alone.probs, rtol=0, atol=1e-12)
    assert np.ptp(alone.probs, axis=0).max() > 1e-2


def test_the_wide_template_keeps_shared_weights_shared_and_the_groups_of_its_template():
    from hqflow.backends.azure.translate import measurement_groups

    t = random_template(np.random.default_rng(9), 3, n_observables=3)
    for shared_weights in (True, False):
        wide = share.wide_template(t, 4, shared_weights).check()  # names distinct, every symbol used
        assert wide.n_qubits == 12 and len(wide.ops) == 4 * len(t.ops) and wide.n_inputs == 4 * t.n_inputs
        assert wide.n_weights == (1 if shared_weights else 4) * t.n_weights and wide.n_observables == 4 * 3
        assert len(measurement_groups(wide)) == len(measurement_groups(t))  # a group: its registers' copies
    assert share.wide_template(t, 1) is t


def test_counts_are_each_registers_marginal():
    """Row r of a deterministic circuit reads its own bits back: X^(bits of r) on 3 wires, then counts."""
    c = Circuit(3, name="bits")
    x = c.inputs("x", 3)
    for q in range(3):
        c.rx(x[q], q)
    t = c.build()
    bits = np.array([[int(b) for b in format(r % 8, "03b")] for r in range(7)])
    batch = CircuitBatch.make(t, np.pi * bits, shots=50, seed=3)
    _, shared, _ = _alone_and_shared(batch, 3)
    assert shared.counts == [{format(r % 8, "03b"): 50} for r in range(7)]


def test_seeds_and_metadata_of_the_wide_batches():
    t = random_template(np.random.default_rng(1), 2)
    batch = CircuitBatch.make(t, np.zeros((5, t.n_inputs)), np.zeros(t.n_weights), shots=10, seed=4, per_row=True)
    full, rest = share.widen(batch, 2)
    np.testing.assert_array_equal(full.row_seeds, batch.row_seeds[[0, 2]])  # a wide row: its first row's seed
    np.testing.assert_array_equal(rest.row_seeds, batch.row_seeds[[4]])
    assert rest.template is t and (full.seed, rest.seed) == (4, 8)


def _policy(n=4, layers=5):
    """The RL policy's circuit (``workloads/rl/policies.pqc_template(4, 5)``: RX·RY·RZ weights, a CZ ring, RX
    inputs), built here without importing torch."""
    c = Circuit(n, name="policy")
    x, w = c.inputs("x", n * layers), c.weights("w", 3 * n * (layers + 1))
    for layer in range(layers + 1):
        for q in range(n):
            c.rx(w[3 * (layer * n + q)], q).ry(w[3 * (layer * n + q) + 1], q).rz(w[3 * (layer * n + q) + 2], q)
        for q in range(n if layer < layers else 0):
            c.cz(q, (q + 1) % n)
        for q in range(n if layer < layers else 0):
            c.rx(x[layer * n + q], q)
    return c.build(observables=[" ".join(f"Z{q}" for q in range(n))])


@pytest.fixture
def make():
    made = []

    def build(**kw):
        made.append(get_backend("emulated-qpu", **kw))
        return made[-1]

    yield build
    for b in made:
        b.close()


def test_the_emulated_qpu_counts_and_prices_shared_circuits(make):
    pytest.importorskip("qiskit", reason="prices count gates on the Qiskit circuit")
    from hqflow.backends.azure.cost import list_price, price_entry

    t = _policy()
    rng = np.random.default_rng(0)
    batch = CircuitBatch.make(t, rng.normal(size=(10, t.n_inputs)), rng.normal(size=t.n_weights), shots=1000)
    alone = make(price_as="ionq.qpu.aria-1")
    qpu = make(price_as="ionq.qpu.aria-1", share="auto", per_circuit=0.5)
    caps = qpu.capabilities
    assert (caps.max_qubits, caps.share, caps.rows_per_circuit(4)) == (25, 25, 6)  # Aria's 25 qubits: 6 rows of 4
    assert alone.capabilities.share == 1 and alone.capabilities.rows_per_circuit(4) == 1
    used, cost = qpu.usage(batch), qpu.estimate_cost(batch)
    assert (used.service_jobs, used.circuits, used.shots) == (1, 2, 2000)  # 6 + 4 rows: 2 circuits
    assert alone.usage(batch).circuits == 10
    aria, counts = price_entry("ionq.qpu.aria-1"), list_price(
        "ionq.qpu.aria-1", CircuitBatch.make(t, batch.inputs[:1], batch.weights, shots=1000)).counts
    gates = 1000 * (aria["price_1q"] * counts["1q"] + aria["price_2q"] * counts["2q"])  # one row's, at 1,000 shots
    assert gates == pytest.approx(39.74) and cost.jobs == 2  # under the $97.50 minimum alone, over it shared
    assert cost.amount == used.cost == pytest.approx(6 * gates + 4 * gates)  # each circuit k x the gates
    assert cost == list_price("ionq.qpu.aria-1", batch, share="auto")
    assert alone.estimate_cost(batch).amount == pytest.approx(10 * 97.5)
    assert qpu.submit(batch).device_seconds == pytest.approx(2 * 0.5)  # the device runs 2 circuits, not 10


def test_one_minimum_per_shared_circuit():
    pytest.importorskip("qiskit", reason="prices count gates on the Qiskit circuit")
    from hqflow.backends.azure.cost import list_price

    c = Circuit(2, name="small")
    c.ry(c.inputs("x", 1)[0], 0).cx(0, 1)
    batch = CircuitBatch.make(c.build(observables=["Z1"]), np.zeros((10, 1)), shots=100)  # gates far below $97.50
    for k, circuits in ((1, 10), (3, 4), (12, 1), ("auto", 1)):
        cost = list_price("ionq.qpu.aria-1", batch, share=k)
        assert (cost.jobs, cost.amount) == (circuits, pytest.approx(circuits * 97.5))
        assert cost.counts["1q"] == 10 * 1  # the gates are the rows' gates whatever the sharing
    with pytest.raises(RequestRefused, match="share=2: two rows of a 13-qubit circuit need 26 qubits and "
                                             "azure:ionq.qpu.aria-1 has 25"):
        list_price("ionq.qpu.aria-1", CircuitBatch.make(Circuit(13).build(), shots=10), share=2)


def test_emulated_values_are_the_rows_alone_bit_for_bit(make):
    """Computed row by row on the wrapped simulator: a row-seeded batch gives share=1's results exactly."""
    rng = np.random.default_rng(5)
    t = random_template(rng, 3, n_observables=2)
    batch = CircuitBatch.make(t, rng.normal(size=(7, t.n_inputs)), rng.normal(size=(7, t.n_weights)), shots=300,
                              seed=11, per_row=True)
    a, b = (make(share=s).submit(batch).result(10) for s in (1, 3))
    np.testing.assert_array_equal(a.values, b.values)
    np.testing.assert_array_equal(a.stderr, b.stderr)
    assert make(share=3).usage(batch).circuits == 3


def test_a_shared_job_reads_its_parts_back_and_cancels_them_all(make):
    """``SharedJob`` over any backend's jobs of the wide batches (here emulated jobs that run the wide circuits on
    the reference): the rows, one done callback once every part has ended, a failure said after every part has
    ended, and a cancel that reaches every part."""
    t = random_template(np.random.default_rng(4), 2)
    batch = CircuitBatch.make(t, np.random.default_rng(0).normal(size=(5, t.n_inputs)), np.ones(t.n_weights))
    ends = []
    qpu = make(per_job=0.01)
    job = share.SharedJob(batch, 3, [qpu.submit(p) for p in share.widen(batch, 3)])
    job.add_done_callback(ends.append)
    np.testing.assert_allclose(job.result(10).values, REF.run_checked(batch).values, atol=1e-12)
    assert job.done() and job.started() and ends == [job]
    failing = make(fail_jobs=(0,), per_job=0.2)
    job = share.SharedJob(batch, 3, [failing.submit(p) for p in share.widen(batch, 3)])
    with pytest.raises(JobFailed, match="injected failure: job 0"):
        job.result(10)
    assert job.jobs[1].done()  # said once every part had ended
    hanging = make(hang_jobs=(0, 1))
    job = share.SharedJob(batch, 3, [hanging.submit(p) for p in share.widen(batch, 3)])
    assert job.cancel() and all(j.status() == "cancelled" for j in job.jobs)
    with pytest.raises(JobCancelled):
        job.result(1)


@pytest.mark.parametrize("value", [0, -2, "x", 2.5, True, None, "1"])
def test_a_bad_share_is_one_line(value):
    for name in ["emulated-qpu"] + (["azure:ionq.qpu.aria-1"] if importlib.util.find_spec("azure.quantum") else []):
        with pytest.raises(BackendError) as err:
            get_backend(name, share=value)
        message = str(err.value)
        assert "share must be a positive integer" in message and "or 'auto'" in message and "\n" not in message


def test_an_explicit_share_no_two_rows_fit_is_refused_at_submit(make):
    qpu = make(max_qubits=5, share=4)
    t = random_template(np.random.default_rng(0), 3)
    batch = CircuitBatch.make(t, np.zeros((4, t.n_inputs)), np.zeros(t.n_weights))
    with pytest.raises(RequestRefused, match="share=4: two rows of a 3-qubit circuit need 6 qubits and emulated-qpu "
                                             "has 5, so no rows can share a circuit; use share=1"):
        qpu.submit(batch)
    assert make(max_qubits=5, share="auto").usage(batch).circuits == 4  # auto: as many as fit, here one
    assert make(max_qubits=6, share=4).usage(batch).circuits == 2  # at most 4, and 2 fit


@pytest.mark.parametrize("value", ["x", "0", "2.5"])
def test_a_bad_share_on_the_command_line_is_one_line(value, capsys, monkeypatch):
    from hqflow.workloads import get_workload

    monkeypatch.setattr(get_workload("vqe"), "run", lambda *a, **k: pytest.fail("ran before its options were checked"))
    assert main(["run", "vqe", "--backend", "emulated-qpu", "--backend-opt", f"share={value}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "share must be a positive integer" in err, err
