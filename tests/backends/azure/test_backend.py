"""``azure:<target>`` end to end: the real SDK over real HTTP to the loopback job service and
Azurite (fixtures in conftest.py). Values are checked against the reference simulator's exact
ones, within 5 sigma by the exact binomial tail (conftest's ``sampled``); job counts against the service's own
counters."""
import json
import os
import time
from dataclasses import replace

import numpy as np
import pytest

from hqflow.backends import BackendError, CircuitBatch, get_backend
from hqflow.ir import Circuit
from hqflow.ir.random import random_template

FORMATS = {"ionq.simulator": "ionq", "quantinuum.sim.h2-1e": "qasm", "rigetti.sim.qvm": "qir"}


def _coin_template():
    c = Circuit(2, name="pair")
    x, w = c.inputs("x", 2), c.weights("w", 1)
    c.ry(x[0], 0).rx(x[1], 1).cx(0, 1).rz(w[0], 1).h(0)
    return c.build(observables=["Z0", "X1", "Z0 Z1", "Y1"])


ROWS = np.random.default_rng(1).uniform(-np.pi, np.pi, (24, 2))


def actor(step, shots):
    """One step's job on the run's pool ``qpu`` (module level: fragments are held by reference)."""
    import hqflow as hq

    batch = CircuitBatch.make(_coin_template(), ROWS[6 * step:6 * step + 6], [0.3], shots=shots, seed=step)
    return {"values": hq.get_client().submit("qpu", batch).result().values}


def _graph(shots):
    import hqflow as hq

    pipe = hq.Pipeline("cloud")
    pipe.input("step", "scalar")
    pipe.preprocess(actor, outputs={"values": "array"}, job_backends=("qpu",), name="actor", params={"shots": shots})
    pipe.output("actor.values")
    return pipe.build()


def _exact(t, x, w):
    return get_backend("reference").run_checked(CircuitBatch.make(t, x, w)).values


@pytest.mark.parametrize("target", sorted(FORMATS))
def test_values_within_five_sigma_in_every_format(azure_workspace, azure_service, sampled, target):
    t = _coin_template()
    rng = np.random.default_rng(FORMATS[target].__len__())
    x, w = rng.uniform(-np.pi, np.pi, (4, 2)), rng.uniform(-np.pi, np.pi, 1)
    backend = get_backend(f"azure:{target}", **azure_workspace, shots=2000)
    assert backend.format.kind == FORMATS[target]
    try:
        res = backend.submit(CircuitBatch.make(t, x, w, seed=3)).result(timeout=120)
    finally:
        backend.close()
    exact = _exact(t, x, w)
    assert res.values.shape == exact.shape and np.all(res.stderr >= 0)
    assert sampled.within(res.values, exact, 2000) == 1.0, (res.values, exact)
    groups = len(backend._prepare(t).payloads.groups)
    assert 1 < groups < len(t.observables)  # Z0 and Z0 Z1 share a job; X1 and Y1 do not commute
    assert azure_service.stats()["jobs"] == 4 * groups == res.metadata["service_jobs"]


def test_random_circuits_on_ionq_json(azure_workspace, sampled):
    backend = get_backend("azure:ionq.simulator", **azure_workspace, shots=4000)
    for seed in range(3):
        t, _ = sampled.terms(random_template(np.random.default_rng(seed), 3, n_ops=12))  # one Pauli product each
        rng = np.random.default_rng(seed + 10)
        x, w = rng.uniform(-np.pi, np.pi, (2, t.n_inputs)), rng.uniform(-np.pi, np.pi, t.n_weights)
        res = backend.submit(CircuitBatch.make(t, x, w, seed=seed)).result(timeout=120)
        assert sampled.within(res.values, _exact(t, x, w), 4000) == 1.0, seed
    backend.close()


@pytest.mark.parametrize("target", sorted(FORMATS))
def test_counts_without_observables_read_like_every_other_backends(azure_workspace, target):
    c = Circuit(3, name="bell")
    c.x(0).h(1).cx(1, 2)
    t = c.build()
    backend = get_backend(f"azure:{target}", **azure_workspace, shots=400)
    res = backend.submit(CircuitBatch.make(t, np.zeros((1, 0)), shots=400, seed=1)).result(timeout=60)
    counts = res.counts[0]  # bit strings, qubit 0 leftmost, as the local simulators give them
    assert sum(counts.values()) == 400 and set(counts) <= {"100", "111"} and min(counts.values()) > 100, counts
    backend.close()


def test_resubmission_with_the_same_key_runs_no_job_twice(azure_workspace, azure_service):
    t = _coin_template()
    x = np.random.default_rng(0).uniform(-1, 1, (3, 2))
    backend = get_backend("azure:ionq.simulator", **azure_workspace, shots=300)
    batch = replace(CircuitBatch.make(t, x, [0.4], seed=5), key="run-1/execute/0")
    first = backend.submit(batch).result(timeout=60)
    jobs = azure_service.stats()["jobs"]
    again = backend.submit(batch).result(timeout=60)  # a resubmission after a crash: same ids
    retry = backend.submit(replace(batch, attempt=1)).result(timeout=60)  # finds attempt 0's jobs
    stats = azure_service.stats()
    assert stats["jobs"] == jobs and stats["duplicated"] == 0 and stats["executions"] == jobs
    np.testing.assert_array_equal(first.values, again.values)
    np.testing.assert_array_equal(first.values, retry.values)
    assert retry.metadata["cost"] == 0.0 or np.isnan(retry.metadata["cost"])  # nothing new was created
    other = backend.submit(replace(batch, key="run-2/execute/0")).result(timeout=60)  # another run: new jobs
    assert azure_service.stats()["jobs"] == 2 * jobs and other.values.shape == first.values.shape
    backend.close()


def test_failed_service_jobs_are_retried_by_the_runtime_without_duplicates(azure_workspace, azure_service):
    import hqflow as hq

    azure_service.configure(job_failure=0.25, http_503=0.05, seed=11)
    result = hq.run(_graph(1000), [{"step": i} for i in range(4)],
                    backends={"qpu": [("azure:ionq.simulator", azure_workspace)]}, executor="local", max_retries=10)
    values = np.concatenate(result.column("values"))
    stats = azure_service.stats()
    assert stats["duplicated"] == 0 and stats["by_status"].get("Failed", 0) > 0
    assert values.shape == (24, 4) and np.isfinite(values).all()
    assert np.all(np.abs(values - _exact(_coin_template(), ROWS, [0.3])) < 0.25)


def test_a_wrong_key_is_one_line_naming_the_workspace(azure_workspace):
    opts = dict(azure_workspace, key="not-the-key-" + "x" * 12)
    backend = get_backend("azure:ionq.simulator", **opts)
    with pytest.raises(BackendError) as err:
        backend.submit(CircuitBatch.make(_coin_template(), [[0.1, 0.2]], [0.3])).result(timeout=60)
    message = str(err.value)
    assert "\n" not in message and repr(azure_workspace["name"]) in message and "401" in message
    assert opts["key"] not in message and azure_workspace["key"] not in message
    assert opts["key"] not in repr(backend) and "key" not in backend.options()
    backend.close()


def test_cancel_cancels_the_service_jobs(azure_workspace, azure_service):
    azure_service.configure(latency=30.0)
    backend = get_backend("azure:ionq.simulator", **azure_workspace)
    job = backend.submit(CircuitBatch.make(_coin_template(), np.zeros((3, 2)), [0.0]))  # 3 rows x 3 groups
    deadline = time.time() + 30
    while len(job.job_ids) < 2 and time.time() < deadline:
        time.sleep(0.01)
    assert job.cancel()  # some jobs created, others being created or not yet
    with pytest.raises(Exception):
        job.result(timeout=5)
    time.sleep(1.0)  # threads that were mid-creation finish, and cancel what they made
    ws = backend.workspace()
    statuses = [ws.get_job(jid).details.status for jid in job.job_ids]
    assert len(statuses) >= 2 and set(statuses) == {"Cancelled"}, statuses
    assert azure_service.stats()["executions"] == 0
    backend.close()


def test_a_session_groups_the_runs_jobs_and_is_closed_at_the_end(azure_workspace, azure_service):
    backend = get_backend("azure:ionq.simulator", **azure_workspace, session=True, job_failure_policy="Continue")
    backend.submit(CircuitBatch.make(_coin_template(), np.zeros((2, 2)), [0.0])).result(timeout=60)
    backend.submit(CircuitBatch.make(_coin_template(), np.ones((2, 2)), [0.0])).result(timeout=60)
    sessions = azure_service.stats()["sessions"]
    assert len(sessions) == 1 and list(sessions.values())[0] not in ("Succeeded", "Failed", "TimedOut")
    backend.close()
    assert list(azure_service.stats()["sessions"].values())[0] in ("Succeeded", "Failed", "TimedOut")
    with pytest.raises(BackendError, match="job_failure_policy"):
        get_backend("azure:ionq.simulator", **azure_workspace, job_failure_policy="Sometimes")


def test_the_estimate_is_what_the_run_is_charged(azure_workspace, azure_service):
    import hqflow as hq

    t = _coin_template()
    backend = get_backend("azure:quantinuum.sim.h2-1e", **azure_workspace)
    batch = CircuitBatch.make(t, ROWS[:6], [0.3], shots=200)
    est = backend.estimate_cost(batch)
    res = backend.submit(batch).result(timeout=60)
    assert est.currency == "EHQC" and est.jobs == azure_service.stats()["jobs"]
    assert res.metadata["cost"] == pytest.approx(est.amount) and est.amount > 5 * est.jobs
    backend.close()

    with pytest.raises(hq.RunFailed, match="budget") as err:
        hq.run(_graph(200), [{"step": i} for i in range(4)], backends={"qpu": [("azure:quantinuum.sim.h2-1e", azure_workspace)]},
               executor="sync", budget=2.5 * est.amount)
    partial = err.value.result
    assert len(partial.outputs) == 2 and partial.extra["spend"] <= 2.5 * est.amount
    assert partial.extra["spend"] == pytest.approx(2 * est.amount)


def test_unknown_targets_and_bad_options_are_one_line_errors(azure_workspace):
    for kwargs, match in [({"shots": 0}, "shots"), ({"max_concurrency": 0}, "max_concurrency"),
                          ({"input_format": "json"}, "format")]:
        with pytest.raises(BackendError, match=match):
            get_backend("azure:ionq.simulator", **azure_workspace, **kwargs)
    with pytest.raises(BackendError, match="target"):
        get_backend("azure:", **azure_workspace)
    backend = get_backend("azure:nowhere.qpu", **azure_workspace, input_format="qir")
    with pytest.raises(BackendError) as err:
        backend.submit(CircuitBatch.make(_coin_template(), np.zeros((1, 2)), [0.0])).result(timeout=60)
    assert "\n" not in str(err.value) and "nowhere.qpu" in str(err.value)
    backend.close()


@pytest.fixture
def cli(azure_workspace, hqflow_cli, monkeypatch):
    """``hqflow`` in this process (conftest's ``hqflow_cli``) with the workspace's key in the environment, where
    a user keeps it, and ``azure_tiny_env`` importable."""
    monkeypatch.setenv("AZURE_QUANTUM_API_KEY", azure_workspace["key"])
    monkeypatch.syspath_prepend(os.path.dirname(__file__))
    return hqflow_cli


# a tiny environment for the training runs on the service: one feature (so one qubit), three steps an
# episode; a cartpole episode's dozens of steps x 58 circuits would only make the tests slower
TINY = ["azure_tiny_env:Blink-v0", "--set", "n_layers=1"]


def _opts(workspace, flag):
    out = []
    for k in ("subscription_id", "resource_group", "name", "location", "endpoint"):
        out += [flag, f"{k}={workspace[k]}"]
    return out


def test_hqflow_backends_lists_the_workspaces_targets(azure_workspace, cli):
    proc = cli("backends", "--json", *_opts(azure_workspace, "--azure-opt"))
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    names = {r["name"] for r in rows}
    assert {"azure:ionq.simulator", "azure:quantinuum.sim.h2-1e", "azure:rigetti.sim.qvm"} <= names
    assert azure_workspace["key"] not in proc.stdout + proc.stderr


def test_dry_run_prices_every_job_and_submits_none(azure_workspace, azure_service, cli):
    proc = cli("run", "vqe", "--steps", "2", "--backend", "azure:ionq.qpu.aria-1", "--dry-run", "--json")
    assert proc.returncode == 0, proc.stderr
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert figures["jobs"] > 0 and figures["currency"] == "USD" and not figures["unpriced"]
    assert figures["estimated_cost"] >= 97.5 * figures["jobs"]  # IonQ's minimum per job
    assert azure_service.stats()["jobs"] == 0


def test_train_on_azure_shows_its_jobs_in_the_trace_and_keeps_the_key_out(azure_workspace, azure_service, tmp_path,
                                                                          cli):
    run = tmp_path / "run"
    proc = cli("train", *TINY, "--backend", "azure:ionq.simulator", "--episodes", "1",
               "--set", "batch_episodes=1", "--run-dir", str(run), "--json", *_opts(azure_workspace, "--backend-opt"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["spend"] == 0.0
    trace = cli("trace", str(run))
    assert trace.returncode == 0 and "qpu:azure:ionq.simulator" in trace.stdout
    spans = json.loads((run / "spans.json").read_text())["spans"]
    azure = [s for s in spans if s["resource"]["kind"] == "qpu" and s["resource"]["name"].startswith("azure:")]
    assert azure and all("cost" in s for s in azure)
    assert azure_service.stats()["jobs"] >= len(azure) and azure_service.stats()["duplicated"] == 0
    key = azure_workspace["key"]
    assert all(key.encode() not in p.read_bytes() for p in run.rglob("*") if p.is_file())
    assert key not in proc.stdout + proc.stderr + trace.stdout + trace.stderr


@pytest.mark.ray
def test_one_budget_for_the_whole_run_under_ray(azure_workspace, azure_service):
    """Jobs submitted inside Ray workers charge the run's one ledger: spend and refusals add up."""
    import hqflow as hq

    per_batch = get_backend("azure:quantinuum.sim.h2-1e").estimate_cost(
        CircuitBatch.make(_coin_template(), ROWS[:6], [0.3], shots=200)).amount
    with pytest.raises(hq.RunFailed, match="budget reached") as err:
        hq.run(_graph(200), [{"step": i} for i in range(4)],
               backends={"qpu": [("azure:quantinuum.sim.h2-1e", azure_workspace)]}, executor="ray",
               ray_num_cpus=2, window=1, budget=2.5 * per_batch)
    partial = err.value.result
    assert partial.extra["spend"] == pytest.approx(2 * per_batch) and partial.extra["refused_jobs"] == 1
    assert len(partial.outputs) == 2 and azure_service.stats()["jobs"] == 2 * 6 * 3
    assert partial.extra["currency"] == "EHQC"


@pytest.mark.azure
def test_a_live_workspace_when_one_is_configured(sampled):
    """Runs only against a real workspace: HQFLOW_AZURE_LIVE=1 and the SDK's environment variables."""
    if os.environ.get("HQFLOW_AZURE_LIVE") != "1" or not os.environ.get("AZURE_QUANTUM_WORKSPACE_NAME"):
        pytest.skip("needs a live Azure Quantum workspace: set HQFLOW_AZURE_LIVE=1 and AZURE_QUANTUM_SUBSCRIPTION_ID, "
                    "AZURE_QUANTUM_WORKSPACE_RG, AZURE_QUANTUM_WORKSPACE_NAME, AZURE_QUANTUM_WORKSPACE_LOCATION")
    t = _coin_template()
    backend = get_backend("azure:ionq.simulator", shots=1000)
    assert ("ionq", "ionq.simulator") in {(p, n) for p, n, _ in backend.targets()}
    res = backend.submit(CircuitBatch.make(t, ROWS[:2], [0.3], seed=0)).result(timeout=1800)
    backend.close()
    assert sampled.within(res.values, _exact(t, ROWS[:2], [0.3]), 1000) == 1.0


def test_a_train_run_stopped_by_its_budget_resumes_with_a_larger_one(azure_workspace, azure_service, tmp_path, cli):
    run = tmp_path / "run"
    args = ["--set", "batch_episodes=1", "--checkpoint-every", "1"]
    first = cli("train", *TINY, "--backend", "azure:quantinuum.sim.h2-1e", "--episodes", "2", "--run-dir",
                str(run), "--budget", "400", *args, *_opts(azure_workspace, "--backend-opt"))
    assert first.returncode == 1, first.stderr[-2000:]
    message = first.stderr.strip().splitlines()[-1]
    assert "budget reached" in message and "raise --budget" in message and f"--resume {run}" in message
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) < 2 and all(r["spend"] <= 400 and r["currency"] == "EHQC" for r in rows)
    config = (run / "config.json").read_text()
    assert azure_workspace["key"] not in config and azure_workspace["endpoint"] in config
    second = cli("train", "--resume", str(run), "--budget", "1000000", "--json")
    assert second.returncode == 0, second.stderr[-2000:]
    figures = json.loads(second.stdout.strip().splitlines()[-1])
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and figures["episodes"] == 2 and figures["currency"] == "EHQC"
    assert rows[-1]["spend"] == pytest.approx(figures["spend"], rel=1e-6) and figures["spend"] > 400
    assert azure_service.stats()["duplicated"] == 0
