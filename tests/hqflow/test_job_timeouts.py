"""The job service's timeouts and retries on the run's clock: on a simulated clock (``hqflow.common.clock.SimClock``)
they take simulated seconds, so these tests wait for nothing, and the cost model predicts what timeouts cost. Its
settings (``JobSettings``) are one value that reaches a Ray worker's service as it is."""
import concurrent.futures as cf
import dataclasses
import pickle
import queue
import threading

import numpy as np
import pytest

import hqflow as hq
from hqflow.backends import Backend, BatchResult, Capabilities, CircuitBatch, FutureJob, JobFailed, Usage
from hqflow.common.clock import SimClock
from hqflow.common.lanes import Lane
from hqflow.engine.executors.actors import _remote_service
from hqflow.engine.executors.ray import RayExecutor
from hqflow.ir import Circuit
from hqflow.jobs.client import JobClient
from hqflow.jobs.dispatch import Member, Pool
from hqflow.jobs.ledger import Ledger
from hqflow.jobs.service import JobService, JobSettings, Parent, RetriesExhausted
from hqflow.planning.costmodel import predict, simulate
from hqflow.planning.profile import BackendProfile, FragmentProfile, Profile
from hqflow.workloads import synthetic


def _template():
    c = Circuit(1, name="coin")
    c.ry(c.inputs("x", 1)[0], 0)
    return c.build(observables=["Z0"])


BATCH = CircuitBatch.make(_template(), [[0.1], [0.2]], shots=10, seed=1)
PARENT = Parent("actor", 0, Lane("cpu", slot=0))


def _advance(clock: SimClock, when: float) -> None:
    """Run the simulated clock's actions up to ``when`` (none of them waits)."""
    events = queue.Queue()
    clock.at(when, lambda: events.put(when))
    clock.wait(events)


class SimJobs(Backend):
    """Jobs on a simulated clock: each fails at once (``fail``), or ends ``seconds`` after its submission (None:
    never, until cancelled)."""

    def __init__(self, clock: SimClock, name: str, seconds: float | None = None, fail: bool = False):
        self.clock, self.name, self.seconds, self.fail = clock, name, seconds, fail
        self.capabilities, self.jobs = Capabilities(name, 4), []

    def submit(self, batch):
        future = cf.Future()
        self.jobs.append(future)
        if self.fail:
            future.set_exception(JobFailed(f"{self.name} failed"))
        elif self.seconds is not None:
            result = BatchResult(values=np.zeros((batch.size, 1)))
            self.clock.at(self.clock.now() + self.seconds, lambda: future.done() or future.set_result(result))
        return FutureJob(future, self.name)


def _service(clock, *backends, settings=JobSettings(), spans=None, **pool) -> JobService:
    members = [Member(b, Lane("qpu", b.name), 1, 1) for b in backends]
    return JobService({"qpu": Pool("qpu", members, now=clock.now, **pool)}, settings, clock=clock,
                      record=None if spans is None else spans.append)


def test_a_job_past_its_timeout_is_cancelled_and_retried_then_fails_in_simulated_seconds():
    clock, spans = SimClock(), []
    never = SimJobs(clock, "never")
    service = _service(clock, never, settings=JobSettings(max_retries=2, job_timeout=5.0), spans=spans)
    future = service.submit("qpu", BATCH, PARENT)
    _advance(clock, 14.9)
    assert not future.done() and service.stats["timeouts"] == 2 and service.stats["retries"] == 2
    assert [f.cancelled() for f in never.jobs] == [True, True, False]  # each timed-out job cancelled on its service
    _advance(clock, 15.0)
    with pytest.raises(RetriesExhausted, match="failed 3 times.*timeout") as info:
        future.result(0)
    assert all(f.cancelled() for f in never.jobs) and service.stats["timeouts"] == 3
    assert [(s.start, s.end, str(s.outcome)) for s in spans] == [(0.0, 5.0, "timeout"), (5.0, 10.0, "timeout"),
                                                                 (10.0, 15.0, "timeout")]
    assert info.value.usage == Usage(3, 6, 60, failed_service_jobs=3)  # each attempt at its prediction, failed
    service.close()


def test_a_job_that_ends_within_its_timeout_is_not_timed_out():
    clock = SimClock()
    service = _service(clock, SimJobs(clock, "slow", seconds=4.9), settings=JobSettings(job_timeout=5.0))
    future = service.submit("qpu", BATCH, PARENT)
    _advance(clock, 100.0)
    assert future.result(0).values.shape == (2, 1) and service.stats["timeouts"] == 0
    service.close()


def test_a_failed_job_is_retried_at_once_on_another_member_while_the_failing_one_rests():
    """The pool's back-off: ``breaker`` failures in a row rest a member ``rest`` seconds, doubling after each failed
    trial up to ``max_rest``; a resting member gets jobs only when no other fits. All in simulated seconds."""
    clock, spans = SimClock(), []
    bad, good = SimJobs(clock, "bad", fail=True), SimJobs(clock, "good", seconds=1.0)
    service = _service(clock, bad, good, spans=spans, breaker=1, rest=2.0, max_rest=3.0)
    first = service.submit("qpu", BATCH, PARENT)  # untried members are explored in order: "bad" first
    _advance(clock, 1.0)
    assert first.result(0).values.shape == (2, 1) and service.stats["retries"] == 1
    assert [(str(s.lane), s.start, s.end, str(s.outcome)) for s in spans] == [
        ("qpu:bad", 0.0, 0.0, "error: bad failed"), ("qpu:good", 0.0, 1.0, "ok")]
    bad_member = service.pools["qpu"].members[0]
    assert (bad_member.rest, bad_member.rest_until) == (2.0, 2.0)  # resting from its failure at 0 s
    second = service.submit("qpu", BATCH, PARENT)  # at 1 s "bad" rests: "good" takes it
    _advance(clock, 2.0)
    assert second.result(0) is not None and len(bad.jobs) == 1 and len(good.jobs) == 2
    pool = service.pools["qpu"]
    for at, rest in ((2.0, 3.0), (5.0, 3.0)):  # failed trials once each rest is over: 2 s doubled, then the cap
        _advance(clock, at)
        assert not bad_member.resting(clock.now())
        pool.start(0, 0)
        pool.finish(0, 0, False)
        assert (bad_member.rest, bad_member.rest_until) == (rest, at + rest)
    service.close()


# -- the cost model: the same service on its simulated clock ------------------------------------------------

def _profile(per_job: float) -> Profile:
    backend = BackendProfile(Lane("qpu", "q"), Lane("qpu", "qpu"), 0.0, per_job, 0.0, 0.0, 0.0, None, jobs=10)
    return Profile((backend,), (FragmentProfile("learn", "cpu", 0.01, 0.0, 10),))


def test_the_cost_model_times_jobs_out_as_a_run_would():
    graph, prof = synthetic.build_graph(synthetic.Config(staleness=0, backend="qpu")), _profile(0.05)
    cut = hq.SchedulerConfig(executor="local", rows_per_job=1)  # a step's two rows: two jobs at once on one device
    plain = predict(graph, 1, prof, cut, rows=2)
    assert predict(graph, 1, prof, dataclasses.replace(cut, job_timeout=0.2), rows=2).makespan == plain.makespan
    # 0.08 s: the second job waits 0.05 s for the device, times out at 0.08 s, and its retry queues behind the
    # cancelled one (a device does not drop a job it has begun): it ends at 0.15 s instead of 0.10 s
    timed = dataclasses.replace(cut, job_timeout=0.08)
    assert predict(graph, 1, prof, timed, rows=2).makespan == pytest.approx(plain.makespan + 0.05)
    run = simulate(graph, 1, prof, timed, rows=2)
    assert run.extra["timeouts"] == 1 and [str(s.outcome) for s in run.spans if s.kind == "execute"].count("timeout") == 1
    with pytest.raises(hq.RunFailed, match="failed 3 times.*timeout"):  # every attempt takes longer than that
        predict(graph, 1, prof, dataclasses.replace(cut, job_timeout=0.03, max_retries=2), rows=2)


# -- the settings, one value to every service of a run ------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class WiderSettings(JobSettings):
    """A setting added to ``JobSettings``: it reaches a worker's service with no other edit."""

    new_setting: str = "default"


class Remote(Backend):
    """A member's handle as a Ray worker gets one (the proxy of a backend actor): plain, picklable data."""

    name, capabilities = "remote", Capabilities("remote", 4)


class PicklableLedger(Ledger):
    """A ledger that travels as the run's does under Ray (a proxy of its actor): pickled, without its lock."""

    def __reduce__(self):
        return PicklableLedger, ()


def test_the_job_settings_reach_a_ray_workers_service_as_they_are():
    config = hq.SchedulerConfig(max_retries=5, job_timeout=12.5, rows_per_job=3)
    assert config.jobs == JobSettings(max_retries=5, job_timeout=12.5, rows_per_job=3)
    backend = Remote()
    for settings in (config.jobs, WiderSettings.of(config), WiderSettings(1, None, None, new_setting="given")):
        driver = JobService({"qpu": Pool("qpu", [Member(backend, Lane("qpu", "remote"), 1, 1)])}, settings,
                            ledger=PicklableLedger())
        client = JobClient(driver, ("qpu",), PARENT)
        spec = pickle.loads(pickle.dumps(RayExecutor._client_spec(None, client)))  # as Ray sends it to the worker
        worker = _remote_service(spec, 0.0, [].append)  # what ``_Worker.call`` builds in the worker
        assert type(worker.settings) is type(settings) and worker.settings == settings
        assert {f.name: getattr(worker.settings, f.name) for f in dataclasses.fields(settings)} == \
            dataclasses.asdict(settings)
        driver.close()
        worker.close()
    driver.tune(rows_per_job=7)  # a plan's change reaches the workers' services from then on
    assert RayExecutor._client_spec(None, client)["settings"] == WiderSettings(1, None, 7, new_setting="given")


@pytest.mark.parametrize("bad, message", [({"max_retries": -1}, "max_retries must be an integer >= 0"),
                                          ({"rows_per_job": 0}, "rows_per_job must be an integer >= 1"),
                                          ({"job_timeout": 0}, "job_timeout must be positive or None")])
def test_job_settings_are_checked_where_they_are_declared(bad, message):
    with pytest.raises(ValueError, match=message):
        JobSettings(**bad)
    with pytest.raises(ValueError, match=message):
        hq.SchedulerConfig(**bad)


def test_alarms_on_the_machines_clock_run_in_time_order_on_one_thread_that_close_ends():
    from hqflow.common.clock import REAL

    alarms, seen, second = REAL.alarms("test-alarms"), [], threading.Event()
    now = REAL.now()
    alarms.at(now + 3600.0, lambda: seen.append("an hour later"))  # never: closed before
    alarms.at(now, lambda: (seen.append("second"), second.set()))
    alarms.at(now - 1.0, lambda: seen.append("first"))  # already due: first
    assert second.wait(60) and seen == ["first", "second"]
    thread = alarms._thread
    alarms.close()
    thread.join(60)
    assert not thread.is_alive() and seen == ["first", "second"]
    alarms.at(now, lambda: seen.append("after close"))  # dropped
    assert seen == ["first", "second"] and alarms._thread is thread
