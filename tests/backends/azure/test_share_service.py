"""Rows that share a circuit on Azure (issue 35, item 2) through the real SDK, the loopback job service and Azurite
(fixtures in conftest.py): the wide circuits are built, translated and sent, each row is read from its register's
marginal, and usage and price count the shared circuits; under failed service jobs nothing is lost or run twice,
and the run's usage is what the service saw."""
import math

import numpy as np
import pytest

import hqflow as hq
from hqflow.backends import CircuitBatch, Usage, get_backend
from hqflow.ir import Circuit

pytest.importorskip("azure.quantum", reason="needs the azure extra: pip install 'hqflow[azure]'")

X = np.random.default_rng(35).uniform(-np.pi, np.pi, (20, 2))


def _template(observables=("Z0", "X1", "Z0 Z1", "Y1")):
    c = Circuit(2, name="pair")
    x, w = c.inputs("x", 2), c.weights("w", 1)
    c.ry(x[0], 0).rx(x[1], 1).cx(0, 1).rz(w[0], 1).h(0)
    return c.build(observables=list(observables))  # three measurement groups: {Z0, X1}, {Z0 Z1}, {Y1}


def _exact(t, x, w):
    return get_backend("reference").run_checked(CircuitBatch.make(t, x, w))


def test_shared_rows_hold_within_five_sigma_and_count_shared_circuits(azure_workspace, azure_service, sampled):
    t, _ = sampled.terms(_template(observables=("Z0", [(0.5, "X1"), (-2.0, "Z0 Z1")], "Y1")))
    backend = get_backend("azure:ionq.simulator", **azure_workspace, shots=2000, share=3)
    assert backend.capabilities.share == 3 and not backend.capabilities.row_seeded
    batch = CircuitBatch.make(t, X[:7], [0.4], seed=2, per_row=True)
    predicted = backend.usage(batch)
    try:
        res = backend.submit(batch).result(timeout=120)
    finally:
        backend.close()
    stats = azure_service.stats()
    assert stats["jobs"] == stats["by_status"]["Succeeded"] == 3 * 3  # ⌈7 / 3⌉ circuits x 3 groups, not 7 x 3
    assert res.metadata["usage"] == predicted == Usage(9, 9, 9 * 2000, 0.0, "USD", 0)
    assert res.metadata["share"] == 3 and res.values.shape == (7, 4)
    exact = _exact(t, X[:7], [0.4]).values
    assert sampled.within(res.values, exact, 2000) == 1.0
    assert sampled.within(res.values[::-1], exact, 2000) < 0.7  # rows in another order would fail


def test_shared_counts_are_each_registers_marginal_on_a_qpu_target(azure_workspace, azure_service, sampled):
    """``ionq.qpu.aria-1`` on the loopback service returns frequencies of its shots: each row's counts are its
    register's marginal of them, and the job is priced as ⌈B / k⌉ circuits of k x the gates."""
    from hqflow.backends.azure.cost import list_price

    t = _template(observables=())
    backend = get_backend("azure:ionq.qpu.aria-1", **azure_workspace, shots=1000, share=4)
    batch = CircuitBatch.make(t, X[:6], [0.4])
    try:
        res = backend.submit(batch).result(timeout=120)
    finally:
        backend.close()
    assert azure_service.stats()["jobs"] == 2 and len(res.counts) == 6  # rows 0-3 and 4-5
    probs = _exact(t, X[:6], [0.4]).probs
    for row, p in zip(res.counts, probs):
        assert sum(row.values()) == 1000 and all(len(b) == 2 for b in row)
        assert all(sampled.probability(row.get(format(i, "02b"), 0) / 1000, p[i], 1000) for i in range(4))
    cost = list_price("ionq.qpu.aria-1", batch, shots=1000, share=4)
    assert res.metadata["usage"].cost == res.metadata["cost"] == cost.amount == 2 * 97.5  # one minimum a circuit


def test_the_price_of_shared_circuits_is_one_circuit_of_k_times_the_gates():
    """The backend prices the wide circuits it builds (the SDK's translation, counted); ``list_price`` multiplies
    one row's gates by k: the same figure."""
    from hqflow.backends.azure.cost import list_price

    c = Circuit(4, name="policy-like")
    x, w = c.inputs("x", 4), c.weights("w", 8)
    for q in range(4):
        c.rx(w[q], q).ry(x[q], q).rz(w[4 + q], q).cz(q, (q + 1) % 4)
    batch = CircuitBatch.make(c.build(observables=["Z0 Z1 Z2 Z3", "X0"]), X.repeat(2, 1)[:10], np.ones(8),
                              shots=4000)
    for share, circuits in (("auto", 2), (4, 3), (1, 10)):
        backend = get_backend("azure:ionq.qpu.aria-1", share=share)
        cost, used = backend.estimate_cost(batch), backend.usage(batch)
        assert cost == list_price("ionq.qpu.aria-1", batch, share=share)
        assert cost.jobs == used.service_jobs == used.circuits == 2 * circuits and used.cost == cost.amount
    assert get_backend("azure:ionq.qpu.aria-1", share="auto").capabilities.rows_per_circuit(4) == 6


def actor(step, rows):
    """One step: ``rows`` rows in one batch on the run's pool ``qpu`` (module level: held by reference)."""
    batch = CircuitBatch.make(_template(), X[:rows], [0.3], shots=500, seed=step)
    return {"values": hq.get_client().submit("qpu", batch).result().values}


@pytest.mark.parametrize("job_tries", [4, 1])
def test_shared_rows_under_failed_jobs_lose_nothing_and_usage_is_what_the_service_saw(
        azure_workspace, azure_service, sampled, job_tries):
    """10% of service jobs fail. With ``job_tries=4`` the backend retries each alone; with 1 a failure fails its wide
    batch, and the runtime's retry finds the service jobs that succeeded by their ids."""
    azure_service.configure(reset=True, job_failure=0.1, seed=11)
    pipe = hq.Pipeline("shared")
    pipe.input("step", "scalar")
    pipe.preprocess(actor, outputs={"values": "array"}, job_backends=("qpu",), name="actor", params={"rows": 20})
    pipe.output("actor.values")
    backend = ("azure:ionq.simulator", dict(azure_workspace, share=3, job_tries=job_tries))
    result = hq.run(pipe.build(), [{"step": 0}], backends={"qpu": [backend]}, executor="local", max_retries=10)
    stats, extra = azure_service.stats(), result.extra
    failed = stats["by_status"].get("Failed", 0)
    values = result.outputs[0]["values"]
    assert failed >= 1 and values.shape == (20, 4) and np.isfinite(values).all()  # under failures, no row lost
    assert sampled.within(values, _exact(_template(), X[:20], [0.3]).values, 500) == 1.0
    circuits = math.ceil(20 / 3) * 3  # 7 circuits x 3 groups
    assert stats["by_status"]["Succeeded"] == circuits and stats["jobs"] == circuits + failed
    assert stats["duplicated"] == 0 and stats["reruns"] == 0 and stats["left"] == 0  # none run twice, none left
    assert (extra["service_jobs"], extra["circuits"], extra["shots"], extra["failed_service_jobs"]) == (
        stats["jobs"], stats["jobs"], stats["jobs"] * 500, failed)
    if job_tries == 1:
        assert extra["retries"] >= 1  # a wide batch failed, and its retry reused its siblings' service jobs
