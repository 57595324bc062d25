"""Packed service jobs on Azure (issue 25) over real HTTP: the real SDK, the loopback job service and
Azurite (fixtures in conftest.py). A 64-row batch in Rigetti's Quil with ``max_bindings=16`` is 8
service jobs (2 measurement groups x 4 chunks), within 5 standard errors of the exact values, and under
the service's faults nothing is lost, duplicated or run twice; cancelling it cancels its chunks."""
import time
import uuid
from dataclasses import replace

import numpy as np
import pytest

import hqflow as hq
from hqflow.backends import CircuitBatch, Usage, get_backend
from hqflow.ir import Circuit

ROWS = 64
X = np.random.default_rng(25).uniform(-np.pi, np.pi, (ROWS, 2))
QUIL = {"input_format": "quil", "max_bindings": 16}


def _template():
    c = Circuit(2, name="packed")
    x, w = c.inputs("x", 2), c.weights("w", 1)
    c.ry(x[0], 0).rx(x[1], 1).cx(0, 1).rz(w[0], 1)
    return c.build(observables=["Z0", "X1", "Z0 Z1"])  # two measurement groups: {Z0, X1}, {Z0 Z1}


def _exact(x, w):
    return get_backend("reference").run_checked(CircuitBatch.make(_template(), x, w)).values


def test_a_packed_batch_is_the_service_jobs_its_limit_gives(azure_workspace, azure_service, sampled):
    backend = get_backend("azure:rigetti.sim.qvm", **azure_workspace, shots=1000, **QUIL)
    batch = CircuitBatch.make(_template(), X, [0.4], seed=1)
    assert backend.usage(batch).service_jobs == 8
    try:
        res = backend.submit(batch).result(timeout=120)
    finally:
        backend.close()
    stats = azure_service.stats()
    assert stats["jobs"] == 8 and stats["by_status"] == {"Succeeded": 8} and res.metadata["service_jobs"] == 8
    assert res.values.shape == (ROWS, 3) and np.mean(res.stderr > 0) > 0.9
    assert sampled.within(res.values, _exact(X, [0.4]), 1000) == 1.0
    assert sampled.within(np.clip(res.values + 0.3, -1, 1), _exact(X, [0.4]), 1000) < 0.5  # the check can fail
    assert res.metadata["usage"] == Usage(8, ROWS * 2, ROWS * 2 * 1000, 0.0, "USD", 0)


def actor(step, rows):
    """One step: ``rows`` rows in one batch on the run's pool ``qpu`` (module level: held by reference)."""
    batch = CircuitBatch.make(_template(), X[:rows], [0.4], shots=500, seed=step)
    result = hq.get_client().submit("qpu", batch).result()
    return {"values": result.values, "stderr": result.stderr}


def _run(workspace, **options):
    pipe = hq.Pipeline("packed")
    pipe.input("step", "scalar")
    pipe.preprocess(actor, outputs={"values": "array", "stderr": "array"}, job_backends=("qpu",), name="actor",
                    params={"rows": ROWS})
    pipe.output("actor.values")
    pipe.output("actor.stderr")
    backend = ("azure:rigetti.sim.qvm", dict(workspace, **QUIL))
    return hq.run(pipe.build(), [{"step": 0}], backends={"qpu": [backend]}, executor="local", **options)


def test_packed_service_jobs_under_faults_lose_nothing_and_run_nothing_twice(azure_workspace, azure_service, sampled):
    for seed in (4, 5, 6):  # the service draws its faults in the order requests arrive: rarely none at all
        azure_service.configure(reset=True, job_failure=0.2, http_503=0.05, drop_connection=0.02, seed=seed)
        result = _run(azure_workspace, max_retries=10)
        stats = azure_service.stats()
        out = result.outputs[0]
        assert out["values"].shape == (ROWS, 3) and np.isfinite(out["values"]).all()  # no row lost
        assert sampled.within(out["values"], _exact(X, [0.4]), 500) == 1.0
        assert stats["by_status"]["Succeeded"] == 8 and stats["jobs"] == 8 + stats["by_status"].get("Failed", 0)
        assert stats["duplicated"] == 0 and stats["reruns"] == 0 and stats["left"] == 0
        if sum(stats["faults"].values()) > 0:
            break
    assert sum(stats["faults"].values()) > 0  # the run above was under faults


def test_cancelling_a_packed_batch_cancels_its_chunks(azure_workspace, azure_service):
    azure_service.configure(latency=30.0)
    backend = get_backend("azure:rigetti.sim.qvm", **azure_workspace, **QUIL)
    job = backend.submit(CircuitBatch.make(_template(), X, [0.0]))  # 4 chunks x 2 groups
    deadline = time.time() + 30
    while len(job.job_ids) < 2 and time.time() < deadline:
        time.sleep(0.01)
    assert job.cancel()
    with pytest.raises(Exception):
        job.result(timeout=5)
    time.sleep(1.0)  # threads that were mid-creation finish, and cancel what they made
    ws = backend.workspace()
    statuses = [ws.get_job(jid).details.status for jid in job.job_ids]
    assert 2 <= len(statuses) <= 8 and set(statuses) == {"Cancelled"}, statuses
    assert azure_service.stats()["executions"] == 0
    backend.close()


def test_row_seeded_samples_do_not_depend_on_how_the_batch_is_cut(azure_workspace):
    """ionq.simulator returns probabilities, sampled here from each row's seed: whole or in parts, the same."""
    backend = get_backend("azure:ionq.simulator", **azure_workspace, shots=200)
    batch = CircuitBatch.make(_template(), X[:6], [0.4], seed=3, per_row=True)
    try:
        whole = backend.submit(batch).result(timeout=60).values
        parts = [backend.submit(p).result(timeout=60).values for p in batch.split(4)]
    finally:
        backend.close()
    np.testing.assert_array_equal(whole, np.concatenate(parts))


def test_a_quil_job_with_bad_substitutions_fails_with_invalid_input(azure_workspace, azure_service):
    from azure.core.credentials import AzureKeyCredential
    from azure.quantum import Job, Workspace

    o = azure_workspace
    ws = Workspace(subscription_id=o["subscription_id"], resource_group=o["resource_group"], name=o["name"],
                   location=o["location"], credential=AzureKeyCredential(o["key"]), _quantum_endpoint=o["endpoint"])
    text = b"DECLARE ro BIT[1]\nDECLARE theta REAL[1]\nRX(theta[0]) 0\nMEASURE 0 ro[0]\n"
    job = Job.from_input_data(ws, name="bad-subs", target="rigetti.sim.qvm", input_data=text,
                              input_params={"shots": 10, "substitutions": {"theta": [[0.1, 0.2]]}},
                              job_id=str(uuid.uuid4()), provider_id="rigetti", input_data_format="rigetti.quil.v1",
                              output_data_format="rigetti.quil-results.v1", content_type="text/plain")
    job.wait_until_completed(print_progress=False, timeout_secs=30, max_poll_wait_secs=1)
    assert job.details.status == "Failed" and job.details.error_data.code == "InvalidInputData"
    assert "REAL[1]" in job.details.error_data.message


def test_a_resubmitted_packed_batch_finds_its_service_jobs(azure_workspace, azure_service):
    backend = get_backend("azure:rigetti.sim.qvm", **azure_workspace, shots=100, **QUIL)
    batch = replace(CircuitBatch.make(_template(), X[:40], [0.4], seed=2), key="run-p/execute/0")
    try:
        first = backend.submit(batch).result(timeout=60)
        retry = backend.submit(replace(batch, attempt=1)).result(timeout=60)  # finds attempt 0's chunks
    finally:
        backend.close()
    stats = azure_service.stats()
    assert stats["jobs"] == 6 and stats["executions"] == 6 and stats["duplicated"] == 0  # 3 chunks x 2 groups
    np.testing.assert_array_equal(first.values, retry.values)
    assert retry.metadata["usage"].service_jobs == 0 and retry.metadata["reused_jobs"] == 6
