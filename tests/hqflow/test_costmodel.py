"""The cost model (hqflow.planning.costmodel): exact on loops whose schedule is known by hand, and calibrated from
measured spans by arithmetic the tests check with figures they choose (how close a calibrated prediction
comes to a real run is measured by benchmarks/planner.py, whatever the machine's load)."""
import dataclasses
import os

import pytest

import hqflow as hq
from hqflow.backends.emulated import EmulatedQPU
from hqflow.planning.costmodel import calibrate, calibrate_cores, predict, simulate
from hqflow.common.lanes import Lane
from hqflow.planning.profile import BackendProfile, FragmentProfile, Profile, profile
from hqflow.workloads import synthetic


POOL = Lane("qpu", "qpu")


def _profile(c=0.01, queue=0.0, per_job=0.02, per_row=0.0, devices=1, failure_rate=0.0, price=None, members=1):
    backends = tuple(BackendProfile(Lane("qpu", "q", k if members > 1 else None), POOL, queue, per_job, per_row, 0.0,
                                    failure_rate, price, devices=devices, jobs=10) for k in range(members))
    return Profile(backends, (FragmentProfile("learn", "cpu", c, 0.0, 10),))


def rollout(step, params):
    return {"batch": None}


def learn(batch, params):
    return {"params": params}


def _nested_graph(staleness):
    """An RL loop's shape: a rollout that submits its own jobs to pool "qpu", then a learner."""
    pipe = hq.Pipeline("nested")
    pipe.input("step", "scalar")
    pipe.preprocess(rollout, name="rollout", outputs={"batch": "any"}, job_backends=("qpu",))
    pipe.learn(learn, outputs={"params": "any"})
    pipe.loop("learn.params", "rollout.params", max_staleness=staleness)
    pipe.loop("learn.params", "learn.params")
    pipe.output("learn.params")
    return pipe.build()


def _graph(staleness):
    return synthetic.build_graph(synthetic.Config(staleness=staleness, backend="qpu"))


@pytest.mark.parametrize("c, q", [(0.01, 0.02), (0.03, 0.01), (0.02, 0.02)])
def test_a_pipelined_loop_reaches_the_overlap_bound_and_a_serial_one_adds_up(c, q):
    n = 20
    pipelined = predict(_graph(1), n, _profile(c=c, per_job=q), hq.SchedulerConfig(executor="local"))
    assert pipelined.makespan == pytest.approx(n * max(c, q) + min(c, q))
    assert pipelined.bound == pytest.approx(pipelined.makespan)
    serial = predict(_graph(0), n, _profile(c=c, per_job=q), hq.SchedulerConfig(executor="local"))
    assert serial.makespan == pytest.approx(n * (c + q))
    assert predict(_graph(1), n, _profile(c=c, per_job=q), hq.SchedulerConfig(executor="sync")).makespan \
        == pytest.approx(n * (c + q))  # one thing at a time
    assert pipelined.utilization["qpu:q"] == pytest.approx(n * q / pipelined.makespan)


def test_queue_latency_overlaps_and_devices_and_members_add_throughput():
    n, cfg = 30, hq.SchedulerConfig(executor="local")
    slow_queue = predict(_graph(8), n, _profile(c=0.001, queue=0.1, per_job=0.01), hq.SchedulerConfig(prefetch=10))
    assert slow_queue.makespan < 0.1 * 3 + n * 0.011  # queue waits overlap: not n * 0.1
    two_in_flight = predict(_graph(8), n, _profile(c=0.001, queue=0.1, per_job=0.01), cfg)  # 1 device + prefetch 1
    assert two_in_flight.makespan == pytest.approx(n * 0.11 / 2, rel=0.1)
    one = predict(_graph(8), n, _profile(c=0.001, per_job=0.02), cfg).makespan
    two = predict(_graph(8), n, _profile(c=0.001, per_job=0.02, devices=2), cfg).makespan
    pool = predict(_graph(8), n, _profile(c=0.001, per_job=0.02, members=2), cfg).makespan
    assert two == pytest.approx(one / 2, rel=0.1) and pool == pytest.approx(one / 2, rel=0.1)
    only_one = predict(_graph(8), n, _profile(c=0.001, per_job=0.02, members=2), cfg, members={"qpu": ["q#0"]})
    assert only_one.makespan == pytest.approx(one)


def test_rows_cut_into_jobs_run_side_by_side_over_a_pool():
    n, cfg = 10, hq.SchedulerConfig(executor="local")
    prof = _profile(c=0.0, per_job=0.002, per_row=0.01, members=2)
    whole = predict(_graph(0), n, prof, cfg, rows=8)  # one job of 8 rows a step: one member at a time
    assert whole.makespan == pytest.approx(n * 0.082) and whole.jobs == n
    halves = predict(_graph(0), n, prof, hq.SchedulerConfig(rows_per_job=4), rows=8)  # 4 + 4 on two members
    assert halves.makespan == pytest.approx(n * 0.042) and halves.jobs == 2 * n
    uneven = predict(_graph(0), n, prof, hq.SchedulerConfig(rows_per_job=3, prefetch=0), rows=8)  # 3 + 3, then 2
    assert uneven.makespan == pytest.approx(n * (0.032 + 0.022)) and uneven.jobs == 3 * n


def test_a_fragments_own_jobs_run_in_rounds_and_share_the_pool():
    backends = tuple(BackendProfile(Lane("qpu", "q", k), POOL, 0.0, 0.01, 0.0, 0.0, 0.0, None, jobs=10) for k in range(2))
    prof = Profile(backends, (FragmentProfile("rollout", "cpu", 0.06, 0.0, 10, jobs=3.0, rows=4.0, classical=0.03),
                              FragmentProfile("learn", "gpu", 0.02, 0.0, 10)))
    n = 20
    serial = predict(_nested_graph(0), n, prof, hq.SchedulerConfig(), members={"qpu": ["q#0"]})
    assert serial.makespan == pytest.approx(n * (3 * (0.01 + 0.01) + 0.02)) and serial.jobs == 3 * n
    assert serial.utilization["qpu:q#0"] == pytest.approx(n * 0.03 / serial.makespan)
    # two actors at staleness 2: their classical slices overlap, and two QPUs take their jobs at once
    one_qpu = predict(_nested_graph(2), n, prof, hq.SchedulerConfig(cpu_workers=2), members={"qpu": ["q#0"]})
    two_qpus = predict(_nested_graph(2), n, prof, hq.SchedulerConfig(cpu_workers=2))
    assert two_qpus.makespan < one_qpu.makespan < serial.makespan
    assert one_qpu.makespan >= n * 0.03  # the one QPU is the bottleneck: 3 jobs of 10 ms a step
    assert two_qpus.bound <= two_qpus.makespan and one_qpu.bound == pytest.approx(n * 0.03 + 0.01)  # + a job
    chosen = hq.plan(_nested_graph(0), n, prof, max_staleness=2)
    assert dict(chosen.members)["qpu"] == ("qpu:q#0", "qpu:q#1") and chosen.staleness >= 1


def test_failures_cost_time_and_money():
    n, cfg = 50, hq.SchedulerConfig(executor="local")
    clean = predict(_graph(0), n, _profile(c=0.0, per_job=0.02, price=1.0), cfg)
    flaky = predict(_graph(0), n, _profile(c=0.0, per_job=0.02, price=1.0, failure_rate=0.5), cfg)
    assert clean.spend == pytest.approx(50.0) and flaky.spend == pytest.approx(100.0)  # expected: 2 attempts a job
    assert flaky.makespan == pytest.approx(2 * clean.makespan, rel=0.1)  # drawn failures, averaged over replays
    assert clean.jobs == flaky.jobs == 50
    assert predict(_graph(0), n, _profile(c=0.0, per_job=0.02, failure_rate=0.5), cfg) == \
        predict(_graph(0), n, _profile(c=0.0, per_job=0.02, failure_rate=0.5), cfg)  # seeded: the same each time


def test_a_step_cut_over_a_flaky_member_waits_for_its_slowest_job():
    prof = Profile((BackendProfile(Lane("qpu", "q", 0), POOL, 0.0, 0.01, 0.0, 0.0, 0.0, None, jobs=10),
                    BackendProfile(Lane("qpu", "q", 1), POOL, 0.0, 0.01, 0.0, 0.0, 0.3, None, jobs=10)),
                   (FragmentProfile("learn", "cpu", 0.0, 0.0, 10),))
    n = 40
    whole = predict(_graph(0), n, prof, hq.SchedulerConfig(prefetch=0), rows=8, members={"qpu": ["q#0"]})
    cut = predict(_graph(0), n, prof, hq.SchedulerConfig(prefetch=0, rows_per_job=4), rows=8)
    # each half takes 10 ms, but one step in three (about) waits 20 ms more for its failed half's retry
    assert whole.makespan == pytest.approx(n * 0.01)
    assert n * 0.01 * 1.2 < cut.makespan < n * 0.01 * 1.9


def test_an_unprofiled_pool_is_a_clear_error():
    with pytest.raises(ValueError, match="no profile of a backend in pool 'qpu'"):
        predict(_graph(0), 3, Profile((), (FragmentProfile("learn", "cpu", 0.01, 0.0, 1),)))
    with pytest.raises(KeyError, match="no profile of fragment 'learn'"):
        predict(_graph(0), 3, Profile(_profile().backends, ()))


class _Span:  # what calibrate reads of a span
    def __init__(self, step, start, end):
        self.step, self.start, self.end = step, start, end


@pytest.mark.parametrize("staleness, executor, overhead", [(0, "local", 0.004), (2, "local", 0.011),
                                                           (1, "sync", 0.0)])
def test_calibration_finds_the_overhead_that_gives_the_measured_makespan(staleness, executor, overhead):
    # the measurement: a run that took what the model says with a known overhead (the simulated run's own trace)
    graph, config, n = _graph(staleness), hq.SchedulerConfig(executor=executor), 16
    prof = _profile(c=0.01, queue=0.005, per_job=0.02)
    measured = simulate(graph, n, Profile(prof.backends, prof.fragments, overhead=overhead), config).spans
    fitted = calibrate(graph, measured, prof, config)
    assert fitted.overhead == pytest.approx(overhead, abs=1e-6)
    assert predict(graph, n, fitted, config).makespan == pytest.approx(max(s.end for s in measured), rel=1e-4)
    # and what it predicts for a longer run grows as the loop's rate says: by one step's time a step
    step = predict(graph, 41, fitted, config).makespan - predict(graph, 40, fitted, config).makespan
    assert predict(graph, 60, fitted, config).makespan == pytest.approx(
        predict(graph, 40, fitted, config).makespan + 20 * step, rel=0.05)


def test_the_warm_up_steps_are_left_out_of_the_calibration():
    graph, config = _graph(0), hq.SchedulerConfig()
    prof = _profile(c=0.01, per_job=0.02)
    measured = simulate(graph, 16, Profile(prof.backends, prof.fragments, overhead=0.003), config).spans
    # step 0 took 5 s longer (a program compiled, a cache warmed), and everything after it waited
    slow_start = [dataclasses.replace(s, end=s.end + 5.0) if s.step == 0 else
                  dataclasses.replace(s, start=s.start + 5.0, end=s.end + 5.0) for s in measured]
    assert calibrate(graph, slow_start, prof, config).overhead == pytest.approx(0.003, abs=1e-6)


def test_cores_are_calibrated_from_work_done_side_by_side(monkeypatch):
    graph = _graph(2)
    backends = tuple(BackendProfile(f"qpu:q#{k}", "qpu:qpu", 0.0, 0.0, 0.0, 0.0, 0.0, None, jobs=10,
                                    compute_per_job=0.02) for k in range(2))
    prof = Profile(backends, (FragmentProfile("learn", "cpu", 0.001, 0.0, 10),))
    monkeypatch.setattr(os, "cpu_count", lambda: 4)  # the machine's count bounds the search, whatever runs this
    for cores in (1.0, 1.5):
        measured = simulate(graph, 16, dataclasses.replace(prof, cores=cores)).spans
        assert calibrate_cores(graph, measured, prof).cores == pytest.approx(cores, rel=1e-3)
    # where the jobs compute nothing here, the CPUs do not matter to the run: it tells nothing of them
    idle = Profile(tuple(dataclasses.replace(b, compute_per_job=0.0, per_job=0.02) for b in backends), prof.fragments)
    assert calibrate_cores(graph, simulate(graph, 16, idle).spans, idle).cores is None


def test_a_member_that_always_fails_still_ends_its_prediction():
    backends = (BackendProfile("qpu:q", "qpu:qpu", 0.0, 0.01, 0.0, 0.0, 1.0, None, jobs=10),)
    guess = predict(_graph(0), 5, Profile(backends, (FragmentProfile("learn", "cpu", 0.001, 0.0, 10),)))
    assert 5 * 0.01 < guess.makespan < float("inf")  # every attempt but one in a hundred fails


def test_a_budget_holds_for_the_whole_run_not_only_for_the_steps_ranked():
    fast_paid = BackendProfile("qpu:q#0", "qpu:qpu", 0.0, 0.01, 0.0, 0.0, 0.0, 1.0, jobs=10)
    slow_free = BackendProfile("qpu:q#1", "qpu:qpu", 0.0, 0.3, 0.0, 0.0, 0.0, 0.0, jobs=10)
    prof = Profile((fast_paid, slow_free), (FragmentProfile("learn", "cpu", 0.005, 0.0, 10),))
    plan = hq.plan(_graph(0), 600, prof, budget=565.0, max_staleness=2, rows=8)
    assert plan.prediction.spend <= 565.0


def test_calibration_is_bounded_and_leaves_a_short_run_alone():
    graph, prof = _graph(0), _profile()
    slow = [_Span(0, 0.0, 1.0), _Span(3, 1.0, 1000.0)]  # more than any overhead explains: the bracket's end
    assert 0.049 < calibrate(graph, slow, prof).overhead <= 0.05
    fast = [_Span(0, 0.0, 1.0), _Span(3, 1.0, 1.001)]  # less than the profile alone: no overhead
    assert calibrate(graph, fast, dataclasses.replace(prof, overhead=0.01)).overhead == 0.0  # bisected down to 0
    assert calibrate(graph, [_Span(0, 0.0, 1.0)], prof) is prof  # nothing after the warm-up


@pytest.mark.parametrize("staleness, executor", [(0, "local"), (2, "local"), (1, "sync")])
def test_a_measured_run_calibrates_and_predicts(staleness, executor):
    """A real run's spans, end to end: profiled, calibrated and predicted (how close the prediction comes
    is a figure of benchmarks/planner.py: timing belongs in benchmarks, not in a test)."""
    cfg = synthetic.Config(staleness=staleness, backend="qpu", batch=8, matrix=8, repeats=2)
    graph, config = synthetic.build_graph(cfg), hq.SchedulerConfig(executor=executor)
    qpu = EmulatedQPU(queue_wait=0.002, per_job=0.001, per_circuit=0.0001)
    spans = hq.run(graph, synthetic.stream(8, cfg), backends={"qpu": qpu}, executor=executor).spans
    measured = profile(spans)
    assert {f.fragment for f in measured.fragments} >= {"learn"} and len(measured.backends) == 1
    assert measured.backends[0].jobs == 8
    fitted = calibrate(graph, spans, measured, config, rows=cfg.batch)
    assert 0.0 <= fitted.overhead <= 0.05
    prediction = predict(graph, 30, fitted, config, rows=cfg.batch)
    assert 0 < prediction.bound <= prediction.makespan < float("inf") and prediction.jobs == 30
