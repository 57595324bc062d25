"""Jobs that a classical fragment submits itself go through the run's pools (retries, failover,
spans with their parent); pools explore and rest failing members; a failed run keeps its results."""
import concurrent.futures as cf
import json
import queue
import threading
import time

import numpy as np
import pytest

import hqflow as hq
from hqflow.backends import (Backend, BackendError, Capabilities, CircuitBatch, FutureJob, JobFailed, LocalBackend,
                             get_backend)
from hqflow.backends.base import BackendAccessError
from hqflow.common.clock import SimClock
from hqflow.jobs.dispatch import Member, Pool
from hqflow.jobs.service import JobService, JobSettings, Parent, RetriesExhausted
from hqflow.ir import Circuit
from hqflow.trace import load_spans, overlap_seconds, save_spans


def _template():
    c = Circuit(2, name="probe")
    x, w = c.inputs("x", 1), c.weights("w", 1)
    c.ry(x[0], 0).ry(w[0], 1).cx(0, 1)
    return c.build(observables=["Z0 Z1"])


TEMPLATE = _template()


def actor(step):
    """Submits two jobs at once through its client and waits for both."""
    client = hq.get_client()
    assert client.devices("qpu") >= 1 and client.capabilities("qpu").max_qubits >= 2
    batch = CircuitBatch.make(TEMPLATE, np.full((3, 1), 0.1 * step), [0.2])
    futures = [client.submit("qpu", batch) for _ in range(2)]
    values = [f.result().values for f in futures]
    return {"y": float(values[0].sum() + values[1].sum())}


def undeclared(step):
    hq.get_client().submit("other", CircuitBatch.make(TEMPLATE, [[0.0]], [0.0]))
    return {"y": 0.0}


def _graph(fn, job_backends=("qpu",)):
    pipe = hq.Pipeline("jobs")
    pipe.input("step", "scalar")
    pipe.preprocess(fn, outputs={"y": "scalar"}, job_backends=job_backends, name="actor")
    pipe.output("actor.y")
    return pipe.build()


def _reference(g, stream):
    """``actor``'s outputs over ``stream``, worked out without a run: its two jobs on the numpy backend."""
    assert g.fragment("actor").fn.endswith(":actor")
    ys = []
    for item in stream:
        batch = CircuitBatch.make(TEMPLATE, np.full((3, 1), 0.1 * item["step"]), [0.2])
        values = get_backend("reference").submit(batch).result().values
        ys.append(float(values.sum() + values.sum()))
    return ys


def _qpu(name, **options):
    return ("emulated-qpu", dict(per_job=0.01, name=name, **options))


def test_job_backends_are_graph_data():
    g = _graph(actor)
    assert g.fragment("actor").job_backends == ("qpu",)
    assert "jobs->qpu" in str(g)
    assert type(g).from_json(g.to_json()).fragment("actor").job_backends == ("qpu",)
    with pytest.raises(Exception, match="job_backends"):
        _graph(actor, job_backends=("",))


@pytest.mark.parametrize("executor", ["sync", "local"])
def test_fragment_jobs_run_through_the_pool_with_parent_spans(executor):
    g = _graph(actor)
    stream = [{"step": i} for i in range(3)]
    result = hq.run(g, stream, backends={"qpu": [_qpu("a"), _qpu("b")]}, executor=executor)
    expected = _reference(g, stream)
    assert np.allclose(result.column("y"), expected)
    jobs = [s for s in result.spans if s.kind == "execute"]
    assert len(jobs) == 6 and all(s.outcome == "ok" for s in jobs)
    outer = {s.step: s for s in result.spans if s.kind == "preprocess"}
    for s in jobs:
        assert s.fragment == "actor" and s.resource == "qpu:qpu" and s.parent_lane == outer[s.step].row
        assert outer[s.step].start - 1e-3 <= s.start and s.end <= outer[s.step].end + 1e-3


@pytest.mark.parametrize("executor", ["sync", "local"])
def test_a_failed_fragment_job_is_retried_on_the_other_member(executor):
    g = _graph(actor)
    pool = [_qpu("bad", fail_jobs=(0, 1)), _qpu("good")]
    result = hq.run(g, [{"step": i} for i in range(3)], backends={"qpu": pool}, executor=executor)
    assert np.allclose(result.column("y"), _reference(g, [{"step": i} for i in range(3)]))
    failed = [s for s in result.spans if s.kind == "execute" and s.outcome != "ok"]
    assert failed and all(s.row.name == "bad" for s in failed)
    assert result.extra["retries"] == len(failed)


def test_undeclared_backend_is_refused_with_a_clear_error():
    g = _graph(undeclared)
    with pytest.raises(hq.FragmentError, match="did not declare backend 'other'"):
        hq.run(g, [{"step": 0}], backends={"qpu": [_qpu("a")]}, executor="sync")


def test_get_client_outside_a_fragment_is_an_error():
    with pytest.raises(BackendError, match="inside a running fragment"):
        hq.get_client()


def test_exhausted_retries_raise_run_failed_with_completed_steps():
    g = _graph(actor)
    # every job from the 5th on fails: steps 0 and 1 (4 jobs) complete, step 2 cannot
    pool = [_qpu("a", fail_jobs=tuple(range(4, 40)))]
    with pytest.raises(hq.RunFailed, match="failed 3 times") as info:
        hq.run(g, [{"step": i} for i in range(4)], backends={"qpu": pool}, executor="sync", max_retries=2)
    partial = info.value.result
    assert partial.column("y") == pytest.approx(_reference(g, [{"step": i} for i in range(2)]))
    assert sorted({s.step for s in partial.spans if s.kind == "preprocess" and s.outcome == "ok"}) == [0, 1]
    # the two jobs of step 2 failed side by side: one ran out of its 3 attempts
    assert sum(s.outcome != "ok" for s in partial.spans if s.kind == "execute" and s.step == 2) >= 3
    assert isinstance(info.value, hq.FragmentError)


class _Fake:
    def __init__(self, name):
        self.name = name
        from hqflow.backends import Capabilities

        self.capabilities = Capabilities(name, 4)


def _pool(n=2, **kw):
    return Pool("p", [Member(_Fake(f"m{i}"), f"qpu:m{i}", 1, 1) for i in range(n)], **kw)


def test_pool_tries_an_unmeasured_member_even_when_one_job_is_in_flight():
    pool = _pool()
    m, slot = pool.choose(1, set())
    pool.start(m, slot)
    pool.finish(m, slot, ok=True)
    second, slot = pool.choose(1, set())
    assert second != m  # never tried yet: it gets the next job


def test_pool_returns_to_a_stale_member_now_and_then():
    pool = _pool(stale_after=5)
    pool.members[0].ewma, pool.members[1].ewma = 0.01, 1.0  # member 1 slow
    pool.members[0].tried_at = pool.members[1].tried_at = 0
    picks = []
    for _ in range(30):
        m, slot = pool.choose(1, set())
        pool.start(m, slot)
        pool.members[m].busy.pop(slot)
        pool.members[m].device.pop(slot, None)
        picks.append(m)
    assert 3 <= picks.count(1) <= 7  # about one job in stale_after
    assert picks.count(0) >= 23


def test_a_big_slow_job_does_not_make_a_member_look_slow_for_small_ones():
    pool = _pool()
    for m in pool.members:
        m.tried_at = 0
    a, b = pool.members
    a.ewma, b.ewma = 0.3, 0.02
    a.by_size = {1: 0.01, 16: 1.0}  # small jobs fast, one 40,000-row job slow
    b.by_size = {1: 0.02}
    assert pool.choose(1, set(), rows=1)[0] == 0
    assert pool.choose(1, set(), rows=40_000)[0] == 1  # a's big jobs are slow; b has no big-job figure: its mean
    pool.start(0, 0, rows=40_000)
    assert a.expect[0] == 1.0


def test_circuit_breaker_rests_a_failing_member_then_tries_it_again():
    pool = _pool(breaker=3, rest=0.05)
    for _ in range(3):
        pool.start(0, 0)
        pool.finish(0, 0, ok=False)
    assert pool.members[0].resting(time.perf_counter())
    assert all(pool.choose(1, set())[0] == 1 for _ in range(5))  # resting: not chosen
    time.sleep(0.06)
    pool.members[0].tried_at, pool.members[1].tried_at = -100, pool.jobs  # member 0 long untried: due a trial
    assert pool.choose(1, set())[0] == 0  # the trial job
    pool.start(0, 0)
    pool.finish(0, 0, ok=False)  # the trial failed: rest again, twice as long
    assert pool.members[0].rest == pytest.approx(0.1)
    pool.members[0].rest_until = 0.0
    pool.start(0, 0)
    pool.finish(0, 0, ok=True)  # a success closes the circuit
    assert pool.members[0].streak == 0 and pool.members[0].rest == 0.0
    assert pool.choose(1, {1}) == (0, 0)


def test_resting_member_is_still_used_when_nothing_else_fits():
    pool = _pool(1, breaker=1, rest=10.0)
    pool.start(0, 0)
    pool.finish(0, 0, ok=False)
    assert pool.choose(1, set()) == (0, 0)


def test_spans_file_version_1_is_still_read(tmp_path):
    doc = {"format": "hqflow.spans", "version": 1, "meta": {}, "spans": [
        {"fragment": "rollout", "kind": "preprocess", "resource": "cpu", "step": 0, "start": 0.0, "end": 10.0,
         "outcome": "ok", "version": 0, "lane": "cpu/0"},
        {"fragment": "rollout/job", "kind": "execute", "resource": "qpu:q", "step": 0, "start": 4.0, "end": 10.0,
         "outcome": "ok", "version": 0, "lane": "qpu:q/cpu/0"}]}
    path = tmp_path / "spans.json"
    path.write_text(json.dumps(doc))
    spans, _ = load_spans(str(path))
    assert spans[1].fragment == "rollout" and spans[1].parent_lane == "cpu/0"
    assert overlap_seconds(spans) == 0.0  # the lane waiting on its own job is not classical work
    save_spans(str(path), spans)
    again, _ = load_spans(str(path))
    assert json.loads(path.read_text())["version"] == 6 and again == spans


def test_spans_file_version_3_is_still_read_and_job_spans_carry_rows_shots_and_queue(tmp_path):
    import hqflow as hq
    from hqflow.backends.emulated import EmulatedQPU
    from hqflow.workloads import synthetic

    cfg = synthetic.Config(staleness=0, backend="qpu")
    res = hq.run(synthetic.build_graph(cfg), synthetic.stream(3, cfg),
                 backends={"qpu": EmulatedQPU(queue_wait=0.01)})
    jobs = [s for s in res.spans if s.kind == "execute"]
    assert jobs and all(s.rows == cfg.batch and s.shots is None for s in jobs)
    assert all(s.queued == pytest.approx(0.01) for s in jobs)  # the emulated QPU's own figure
    path = tmp_path / "spans.json"
    doc = {"format": "hqflow.spans", "version": 3, "meta": {},
           "spans": [{k: v for k, v in s.to_dict().items() if k not in ("rows", "shots", "queued")} for s in jobs]}
    path.write_text(json.dumps(doc))
    spans, _ = load_spans(str(path))
    assert [s.rows for s in spans] == [None] * len(jobs) and [s.start for s in spans] == [s.start for s in jobs]


@pytest.mark.ray
def test_a_failed_fragment_job_is_retried_under_ray():
    g = _graph(actor)
    pool = [_qpu("bad", fail_jobs=(0,)), _qpu("good")]
    stream = [{"step": i} for i in range(3)]
    result = hq.run(g, stream, backends={"qpu": pool}, executor="ray", ray_num_cpus=2)
    assert np.allclose(result.column("y"), _reference(g, stream))
    jobs = [s for s in result.spans if s.kind == "execute"]
    failed = [s for s in jobs if s.outcome != "ok"]
    assert len(failed) == 1 and failed[0].row.name == "bad"
    assert sum(s.outcome == "ok" for s in jobs) == 6
    outer = {s.step: s for s in result.spans if s.kind == "preprocess"}
    assert all(s.parent_lane == outer[s.step].row for s in jobs)


class _Queued(FutureJob):
    """A job that leaves its service's queue when the test says, and then never finishes."""

    def __init__(self):
        super().__init__(cf.Future(), "queued")
        self.out, self.cancelled = threading.Event(), threading.Event()

    def started(self) -> bool:
        return self.out.is_set()

    def cancel(self) -> bool:
        self.cancelled.set()
        return self._future.cancel()


class _QueuedBackend(Backend):  # a member handle: the job service asks it what Backend declares
    name, max_in_flight = "queued", 1

    def __init__(self, make=_Queued):
        self.jobs, self.make = [], make

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities("queued", 4)

    def submit(self, batch):
        self.jobs.append(self.make())
        return self.jobs[-1]


def _advance(clock: SimClock, when: float) -> None:
    """Run the simulated clock's actions up to ``when``."""
    events = queue.Queue()
    clock.at(when, lambda: events.put(when))
    clock.wait(events)


def _service(backend, **options) -> JobService:
    return JobService({"qpu": Pool("qpu", [Member(backend, "qpu:queued", 1, 1)])}, JobSettings(**options))


def test_a_queued_job_is_waited_for_and_timed_out_on_its_running_time():
    """22.21: job_timeout counted from submission, so a long queue timed every attempt out."""
    backend, clock = _QueuedBackend(), SimClock()  # the run's clock, simulated: nothing here waits
    service = JobService({"qpu": Pool("qpu", [Member(backend, "qpu:queued", 1, 1)], now=clock.now)},
                         JobSettings(job_timeout=0.2, max_retries=0), clock=clock)
    future = service.submit("qpu", CircuitBatch.make(TEMPLATE, [[0.1]], [0.2]), Parent("actor", 0, "cpu/0"))
    job = backend.jobs[0]
    _advance(clock, 1.0)  # five timeouts long, in the queue: not hung
    assert service.stats["timeouts"] == 0 and not job.cancelled.is_set() and not future.done()
    job.out.set()  # it runs now, and never ends
    _advance(clock, 1.19)  # seen out of the queue within a tick (0.05 s): not yet past its 0.2 s
    assert not job.cancelled.is_set() and not future.done()
    _advance(clock, 1.3)
    assert job.cancelled.is_set()  # timed out on its running time, and cancelled
    with pytest.raises(RetriesExhausted, match="timeout"):
        future.result(60)
    assert service.stats["timeouts"] == 1 and len(backend.jobs) == 1
    service.close()


class _Refused(LocalBackend):
    name = "refused"

    def __init__(self, error):
        super().__init__()
        self.error, self.calls = error, 0

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities("refused", 4)

    def run(self, batch):
        self.calls += 1
        raise self.error


def test_an_error_that_is_not_worth_retrying_fails_the_request_at_once():
    """22.23: refused credentials were retried max_retries times; a transient failure still is."""
    refused = _Refused(BackendAccessError("workspace 'w' refused the credentials (401 Unauthorized)"))
    service = _service(refused, max_retries=3)
    future = service.submit("qpu", CircuitBatch.make(TEMPLATE, [[0.1]], [0.2]), Parent("actor", 0, "cpu/0"))
    with pytest.raises(BackendAccessError, match="401"):
        future.result(60)
    assert refused.calls == 1 and service.stats["retries"] == 0
    flaky = _Refused(JobFailed("the device reported an error"))
    service = _service(flaky, max_retries=3)
    future = service.submit("qpu", CircuitBatch.make(TEMPLATE, [[0.1]], [0.2]), Parent("actor", 0, "cpu/0"))
    with pytest.raises(RetriesExhausted):
        future.result(60)
    assert flaky.calls == 4 and service.stats["retries"] == 3


def test_closing_the_service_cancels_what_failed_attempts_left_running():
    """22.20: a cloud batch that fails leaves its healthy rows running for the retry; when the run ends
    instead, cancelling the failed job ends them."""

    class _Failing(_Queued):
        def __init__(self):
            super().__init__()
            self._future.set_exception(JobFailed("row 3 failed 4 times"))

    backend = _QueuedBackend(_Failing)
    service = _service(backend, max_retries=1)
    future = service.submit("qpu", CircuitBatch.make(TEMPLATE, [[0.1]], [0.2]), Parent("actor", 0, "cpu/0"))
    with pytest.raises(RetriesExhausted):
        future.result(60)
    assert len(backend.jobs) == 2 and not any(j.cancelled.is_set() for j in backend.jobs)
    service.close()
    assert all(j.cancelled.is_set() for j in backend.jobs)


def test_a_job_submitted_while_the_service_closes_is_cancelled_counted_and_traced():
    """34.30: close() took its list of live attempts while one was still inside a slow ``submit``; that job then
    ran on, neither cancelled nor counted (the backend got 103 jobs, usage and spans said 102)."""

    class _Slow(_QueuedBackend):
        def __init__(self):
            super().__init__()
            self.entered, self.release = threading.Event(), threading.Event()

        def submit(self, batch):
            self.entered.set()
            assert self.release.wait(60)
            return super().submit(batch)

    backend, spans = _Slow(), []
    service = JobService({"qpu": Pool("qpu", [Member(backend, "qpu:queued", 1, 1)])}, record=spans.append)
    submitter = threading.Thread(target=service.submit, args=(
        "qpu", CircuitBatch.make(TEMPLATE, [[0.1], [0.2]], [0.2]), Parent("actor", 0, "cpu/0")))
    submitter.start()
    assert backend.entered.wait(60)  # inside submit
    service.close()  # the run stops now
    backend.release.set()
    submitter.join(60)
    assert len(backend.jobs) == 1 and backend.jobs[0].cancelled.is_set()
    assert service.usage.service_jobs == 1 and service.usage.circuits == 2 and service.stats["service_jobs"] == 1
    assert [str(s.outcome) for s in spans] == ["cancelled"]


def counting_actor(step):
    """``actor``, and the threads of its process as it starts."""
    threads = threading.active_count()
    return {"y": actor(step)["y"], "threads": threads}


def test_a_worker_call_leaves_no_thread_behind_and_returns_its_jobs_counts(monkeypatch):  # issue 34, items 27, 28
    """A Ray worker's call (its code path, in this process) builds a job service for its fragment's jobs: with
    ``job_timeout`` its timeout watchdog is a thread, which ends with the call; the call hands back the service's
    counts and usage, for the driver's statistics."""
    import hqflow.engine.executors.actors as actors
    from hqflow.engine.executors import SyncExecutor
    from hqflow.engine.executors.actors import _Worker
    from hqflow.common.lanes import Lane
    from hqflow.jobs.ledger import Ledger

    handle, _ = SyncExecutor().backend(_qpu("bad", fail_jobs=(0,)), 1)
    spec = {"run": "threads", "names": ("qpu",), "parent": Parent("actor", 0, Lane("cpu", slot=0), submitted=True),
            "pools": {"qpu": [(handle, Lane("qpu", "bad"), 1, 2, None)]},
            "settings": JobSettings(max_retries=3, job_timeout=3600.0), "ledger": Ledger()}
    fragment = _graph(actor).fragment("actor")
    monkeypatch.setattr(actors, "_node", lambda: "here")  # (Ray's node id, which would start Ray here)
    worker, before, failed = _Worker(), threading.active_count(), []
    for step in range(12):
        (out, spans, _, _, (stats, usage)), _ = worker.call(fragment, {"step": step}, spec)
        jobs = [s for s in spans if s.kind == "execute"]
        assert stats["jobs"] == len(jobs) and stats["retries"] == stats["failed_jobs"]
        assert stats["circuits"] == usage.circuits == sum(s.rows for s in jobs) == 3 * len(jobs)
        failed.append(sum(s.outcome != "ok" for s in jobs))
        assert stats["failed_jobs"] == failed[-1]
    assert failed == [1] + [0] * 11  # the member failed its first job: each call counts its own
    deadline = time.monotonic() + 60  # a watchdog told to stop ends at once; on a busy machine, soon
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() <= before, [t.name for t in threading.enumerate()]


def _counting_graph():
    pipe = hq.Pipeline("jobs")
    pipe.input("step", "scalar")
    pipe.preprocess(counting_actor, outputs={"y": "scalar", "threads": "scalar"}, job_backends=("qpu",), name="actor")
    return pipe.output("actor.y").output("actor.threads").build()


@pytest.mark.ray
def test_under_ray_result_extra_counts_the_workers_jobs_and_their_threads_stay_put():  # issue 34, items 27, 28
    """Jobs a fragment submits from a Ray worker, some failed and retried: ``result.extra`` counts them as the
    spans do. With ``job_timeout``, the worker's threads do not grow step by step (a watchdog per call did)."""
    pool = [_qpu("bad", fail_jobs=(0, 3, 7)), _qpu("good")]
    stream = [{"step": i} for i in range(12)]
    result = hq.run(_counting_graph(), stream, backends={"qpu": pool}, executor="ray", ray_num_cpus=2,
                    job_timeout=600.0)
    assert np.allclose(result.column("y"), _reference(_graph(actor), stream))
    jobs = [s for s in result.spans if s.kind == "execute"]
    failed = sum(s.outcome != "ok" for s in jobs)
    extra = result.extra
    assert failed == 3 and extra["failed_jobs"] == extra["retries"] == failed
    assert extra["quantum_jobs"] == len(jobs) == 2 * len(stream) + failed
    assert extra["circuits"] == sum(s.rows for s in jobs) and extra["service_jobs"] == len(jobs)
    threads = result.column("threads")
    assert threads[-1] - threads[1] < 5, threads  # one more a step, before
