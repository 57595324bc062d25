"""What jobs use on their service, counted by the job service: per attempt (the job's report, else its
backend's prediction), per request (``metadata["usage"]``, or a failed request's ``exception.usage``), per
run (``stats``), and by a fragment's ``JobClient`` into its usage meter; pools' service limits; the dry run's."""
import ast
import concurrent.futures as cf
from pathlib import Path

import numpy as np
import pytest

import hqflow as hq
from hqflow.jobs import accounting as usage
from hqflow.backends import Backend, BackendError, Capabilities, CircuitBatch, FutureJob, Usage, register_backend
from hqflow.backends.azure.cost import Cost
from hqflow.backends.dryrun import DryRunBackend
from hqflow.backends.emulated import EmulatedQPU
from hqflow.backends.reference import ReferenceBackend
from hqflow.jobs.dispatch import Member, Pool
from hqflow.ir import Circuit
from hqflow.jobs.accounting import attempt_usage
from hqflow.jobs.client import JobClient
from hqflow.jobs.service import JobService, JobSettings, Parent, RetriesExhausted


def _template():
    c = Circuit(1, name="coin")
    x = c.inputs("x", 1)
    c.ry(x[0], 0)
    return c.build(observables=["Z0"])


TEMPLATE = _template()
ANGLES = np.linspace(0.0, np.pi, 64)


def _batch(rows=64, shots=None):
    return CircuitBatch.make(TEMPLATE, ANGLES[:rows, None], shots=shots, seed=7)


def _service(backend, capacity=4, **options) -> JobService:
    return JobService({"qpu": Pool("qpu", [Member(backend, "qpu:test", 1, capacity)])}, JobSettings(**options))


def _parent():
    return Parent("actor", 0, "cpu/0")


def _run(service, batch):
    return service.submit("qpu", batch, _parent()).result(60)


def test_a_packed_batch_counts_one_service_job_per_submit_its_circuits_and_shots():
    qpu = EmulatedQPU(max_circuits_per_job=16)
    service = _service(qpu)
    try:
        result = _run(service, _batch(64, shots=100))
    finally:
        service.close()
        qpu.close()
    assert result.values.shape == (64, 1)
    assert result.metadata["usage"] == Usage(service_jobs=4, circuits=64, shots=6400)
    assert {k: service.stats[k] for k in ("jobs", "service_jobs", "circuits", "shots", "failed_service_jobs")} == \
        {"jobs": 4, "service_jobs": 4, "circuits": 64, "shots": 6400, "failed_service_jobs": 0}
    assert service.usage == result.metadata["usage"]


def test_a_retried_part_counts_its_failed_service_job_and_every_row_comes_back_once_in_order():
    qpu = EmulatedQPU(max_circuits_per_job=16, fail_jobs=(0,))  # the first part's first attempt fails
    service = _service(qpu)
    try:
        result = _run(service, _batch(64))
    finally:
        service.close()
        qpu.close()
    assert np.allclose(result.values[:, 0], np.cos(ANGLES))  # each row's own value, once, in order
    assert result.metadata["usage"] == Usage(service_jobs=5, circuits=80, shots=0, failed_service_jobs=1)
    assert result.metadata["parts"] == 4
    assert service.stats["retries"] == 1 and service.stats["failed_service_jobs"] == 1
    assert service.stats["service_jobs"] == 5


class Reporting(ReferenceBackend):
    """The reference simulator, two rows a job, whose results report what they used: the older keys
    (``service_jobs``, ``failed_jobs``, ``cost``, ``currency``, ``shots`` per circuit) or a ``Usage``."""

    name = "reporting"

    def __init__(self, report):
        super().__init__()
        self.report = report

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities("reporting", 4, max_circuits_per_job=2)

    def run(self, batch):
        res = super().run(batch)
        res.metadata.update(self.report)
        return res


def test_a_jobs_report_in_the_older_keys_counts_in_place_of_the_prediction():
    report = {"service_jobs": 3, "failed_jobs": 1, "cost": 0.5, "currency": "EUR", "shots": 10}
    service = _service(Reporting(report))
    result = _run(service, _batch(4, shots=50))
    service.close()
    # per part: 3 service jobs (one failed), 2 circuits of 10 shots (the report's, not the batch's 50), 0.5 EUR
    assert result.metadata["usage"] == Usage(6, 4, 40, 1.0, "EUR", 2)
    assert (service.stats["service_jobs"], service.stats["shots"]) == (6, 40)


def test_a_usage_in_a_jobs_metadata_counts_as_it_is():
    used = Usage(service_jobs=7, circuits=2, shots=123, cost=0.0, currency=None, failed_service_jobs=0)
    service = _service(Reporting({"usage": used, "service_jobs": 99}))
    result = _run(service, _batch(4, shots=50))
    service.close()
    assert result.metadata["usage"] == used + used  # the total over both parts, not part 0's own
    assert attempt_usage({"service_jobs": "many", "cost": float("nan")}, Usage(1, 2, 3)) == Usage(1, 2, 3)


class Priced(ReferenceBackend):
    name = "priced"

    def estimate_cost(self, batch):
        return Cost(0.25 * batch.size, "USD", batch.size, batch.shots or 0)


def test_a_priced_backends_prediction_carries_its_estimate():
    service = _service(Priced())
    result = _run(service, _batch(4, shots=10))
    service.close()
    assert result.metadata["usage"] == Usage(1, 4, 40, 1.0, "USD")


class Failing(ReferenceBackend):
    """Every job fails on its service (after it was submitted)."""

    name = "failing"

    def run(self, batch):
        raise hq.backends.JobFailed("the device reported an error")


class Refusing(Backend):
    """Refuses every batch at submission: no job reaches its service."""

    name, capabilities = "refusing", Capabilities("refusing", 4)

    def submit(self, batch):
        raise BackendError("the service is closed for maintenance")


class Never(Backend):
    """Jobs that never end (until cancelled)."""

    name, capabilities = "never", Capabilities("never", 4)

    def submit(self, batch):
        return FutureJob(cf.Future(), self.name)


def test_a_failed_request_raises_with_the_usage_of_all_its_attempts():
    service = _service(Failing(), max_retries=1)
    with pytest.raises(RetriesExhausted) as info:
        _run(service, _batch(3, shots=10))
    service.close()
    assert info.value.usage == Usage(2, 6, 60, failed_service_jobs=2)
    assert service.stats["failed_service_jobs"] == 2
    refused = _service(Refusing(), max_retries=1)
    with pytest.raises(RetriesExhausted) as info:
        _run(refused, _batch(3, shots=10))
    refused.close()
    assert info.value.usage == Usage() and refused.stats["service_jobs"] == 0  # nothing reached the service


def test_a_timed_out_or_cancelled_attempt_counts_its_prediction():
    service = _service(Never(), job_timeout=0.05, max_retries=0)
    with pytest.raises(RetriesExhausted, match="timeout") as info:
        _run(service, _batch(2, shots=5))
    service.close()
    assert info.value.usage == Usage(1, 2, 10, failed_service_jobs=1)
    service = _service(Never())
    future = service.submit("qpu", _batch(2, shots=5), _parent())
    service.close()  # cancels it: a cancelled service job may still bill
    with pytest.raises(BackendError, match="run ended") as info:
        future.result(60)
    assert info.value.usage == Usage(1, 2, 10) and service.stats["service_jobs"] == 1


def test_a_job_client_records_usage_into_the_meter_bound_where_it_submits():
    qpu = EmulatedQPU(max_circuits_per_job=16)
    service = _service(qpu)
    client = JobClient(service, ("qpu",), _parent())
    try:
        with usage.meter() as m:
            first = client.submit("qpu", _batch(64, shots=10)).result(60)
            assert m.total == Usage(4, 64, 640)  # recorded before the future was done
            client.submit("qpu", _batch(16, shots=10)).result(60)
        assert isinstance(first, hq.backends.BatchResult)
        assert m.total == Usage(5, 80, 800)
        assert client.submit("qpu", _batch(1)).result(60).metadata["usage"] == Usage(1, 1, 0)  # no meter: kept
        assert m.total == Usage(5, 80, 800)
    finally:
        service.close()
        qpu.close()
    failing = _service(Failing(), max_retries=2)
    client = JobClient(failing, ("qpu",), _parent())
    with usage.meter() as m:
        future = client.submit("qpu", _batch(2, shots=10))
        with pytest.raises(RetriesExhausted):
            future.result(60)
        assert m.total == Usage(3, 6, 60, failed_service_jobs=3)
    failing.close()


def metered_actor(step):
    """Submits a 64-row batch through its client under a meter; returns what the meter counted."""
    with usage.meter() as m:
        hq.get_client().submit("qpu", _batch(64, shots=10)).result()
    return {"jobs": float(m.total.service_jobs), "shots": float(m.total.shots)}


def _metered_graph():
    pipe = hq.Pipeline("metered")
    pipe.input("step", "scalar")
    pipe.preprocess(metered_actor, outputs={"jobs": "scalar", "shots": "scalar"}, job_backends=("qpu",),
                    name="actor")
    pipe.output("actor.jobs")
    pipe.output("actor.shots")
    return pipe.build()


@pytest.mark.parametrize("executor", ["sync", "local"])
def test_a_fragments_meter_counts_its_jobs_and_the_runs_stats_agree(executor):
    result = hq.run(_metered_graph(), [{"step": i} for i in range(2)],
                    backends={"qpu": ("emulated-qpu", {"max_circuits_per_job": 16})}, executor=executor)
    assert result.column("jobs") == [4.0, 4.0] and result.column("shots") == [640.0, 640.0]
    assert (result.extra["service_jobs"], result.extra["circuits"], result.extra["shots"]) == (8, 128, 1280)
    assert result.extra["failed_service_jobs"] == 0


@pytest.mark.ray
def test_a_fragments_meter_counts_its_jobs_in_a_ray_worker():
    """The worker's client submits through a job service of its own; the usage rides in the results."""
    result = hq.run(_metered_graph(), [{"step": i} for i in range(2)],
                    backends={"qpu": ("emulated-qpu", {"max_circuits_per_job": 16})}, executor="ray",
                    ray_num_cpus=2)
    assert result.column("jobs") == [4.0, 4.0] and result.column("shots") == [640.0, 640.0]


def test_a_pool_takes_its_members_smallest_service_limits():
    class Fake:
        def __init__(self, caps):
            self.name, self.capabilities = caps.name, caps

    def pool(*caps):
        return Pool("p", [Member(Fake(c), f"qpu:{c.name}", 1, 1) for c in caps])

    a = Capabilities("a", 4, service_job_rows=8, row_seeded=True)
    b = Capabilities("b", 5, service_job_rows=1, max_shots=10_000, row_seeded=False)
    c = Capabilities("c", 3, max_shots=2_000, row_seeded=True)
    caps = pool(a, b, c).capabilities
    assert (caps.service_job_rows, caps.max_shots, caps.row_seeded, caps.max_qubits) == (1, 2_000, False, 5)
    caps = pool(a, c).capabilities
    assert (caps.service_job_rows, caps.max_shots, caps.row_seeded) == (8, 2_000, True)
    caps = pool(Capabilities("d", 2), Capabilities("e", 2)).capabilities
    assert (caps.service_job_rows, caps.max_shots, caps.row_seeded) == (None, None, False)


class Capped(Backend):
    """A sampling-only target that packs nothing: one service job per row, at most 5,000 shots, 500 by default."""

    name, shots = "usage-capped", 500
    capabilities = Capabilities("usage-capped", 4, exact=False, service_job_rows=1, max_shots=5_000, row_seeded=True)

    def usage(self, batch):
        return Usage.of(batch, self.capabilities.service_jobs(batch.size))


def test_the_dry_run_forwards_its_targets_service_limits_and_usage():
    register_backend("usage-capped", Capped, listed=False)
    dry = DryRunBackend("usage-capped")
    caps = dry.capabilities
    assert (caps.service_job_rows, caps.max_shots, caps.row_seeded) == (1, 5_000, True)
    assert dry.usage(_batch(3)) == Usage(3, 3, 1_500)  # the target's default shots
    assert dry.usage(_batch(3, shots=20)) == Usage(3, 3, 60)
    dry.close()


ROOT = Path(__file__).resolve().parents[2]
_USAGES = {"usage", "used", "paid"}  # names that hold a ``Usage`` in the core and the workloads
_FIGURES = {"service_jobs", "circuits", "failed_service_jobs"}  # its figures with names no other quantity has


def _usage_like(node) -> bool:
    """A ``Usage`` or one of its figures: ``Usage(...)``/``Usage.of(...)``, ``getattr`` of one, or a name, attribute,
    ``["key"]`` or ``.get("key")`` called one of ``_USAGES`` or ``_FIGURES``."""
    if isinstance(node, ast.Call):
        f = node.func
        if (isinstance(f, ast.Name) and f.id == "Usage") or (isinstance(f, ast.Attribute) and f.attr == "of"
                                                              and getattr(f.value, "id", None) == "Usage"):
            return True
        if isinstance(f, ast.Name) and f.id == "getattr" and node.args:
            return _usage_like(node.args[0])
        key = node.args[0] if isinstance(f, ast.Attribute) and f.attr == "get" and node.args else None
    else:
        key = node.slice if isinstance(node, ast.Subscript) else None
    name = getattr(node, "id", None) or getattr(node, "attr", None) or getattr(key, "value", None)
    return name in _USAGES | _FIGURES


def _counting(tree) -> list[str]:
    """Where ``tree`` counts usage: a ``+`` or ``-`` (or ``+=``, ``-=``) with a ``Usage`` or one of its figures on
    either side, or a ``Usage(...)`` made of sums (an argument that is a ``+``/``-``/``sum(...)``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.AugAssign) and isinstance(node.op, (ast.Add, ast.Sub)):
            hit = _usage_like(node.target) or _usage_like(node.value)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            hit = _usage_like(node.left) or _usage_like(node.right)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Usage":
            hit = any(isinstance(a, ast.BinOp) or getattr(getattr(a, "func", None), "id", None) == "sum"
                      for a in [*node.args, *(k.value for k in node.keywords)])
        else:
            continue
        if hit:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_usage_is_counted_in_one_module():
    """Issue 36: usage was counted in five places (the job service and its stats, the ledger, the meter and the
    job client feeding it, the RL record, a worker's counts). Now only ``hqflow.jobs.accounting`` adds usage up
    (``_counting`` says what that is); the ledger, the meter, the RL record and the spans read it or call it
    (``plus``, ``Tally``, ``across``, ``Books``). The backends, which report what their own jobs used, are not
    scanned."""
    accounting = ROOT / "hqflow" / "jobs" / "accounting.py"
    assert _counting(ast.parse(accounting.read_text()))  # the rule finds the counting where it is
    outside = {str(p.relative_to(ROOT)): _counting(ast.parse(p.read_text()))
               for folder in ("hqflow", "workloads", "cli") for p in sorted((ROOT / folder).rglob("*.py")) if p != accounting}
    assert {path: hits for path, hits in outside.items() if hits} == {}
