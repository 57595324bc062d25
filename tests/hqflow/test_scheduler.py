"""The overlap scheduler: exactness at staleness 0, no lost or doubled micro-batches,
bounded staleness, backpressure, retries on other backends, timeouts, splitting."""
import dataclasses
from collections import Counter

import numpy as np
import pytest

import hqflow as hq
from hqflow.backends import get_backend
from hqflow.backends.emulated import EmulatedQPU
from hqflow.workloads import synthetic

CFG = synthetic.Config(staleness=0, backend="qpu")


def reference(cfg=CFG, steps=6):
    """The sync executor on the exact numpy backend: one thing at a time, the semantics that
    test_staleness_zero_is_bit_identical_to_the_plain_loop pins to a plain loop."""
    return hq.run(synthetic.build_graph(cfg), synthetic.stream(steps, cfg), backends={"qpu": get_backend("reference")},
                  executor="sync")


def emulated(**kw):
    return EmulatedQPU("reference", **kw)


def ok_execute_spans(res):
    return [s for s in res.spans if s.kind == "execute" and s.outcome == "ok"]


@pytest.mark.parametrize("executor", ["sync", "local"])
def test_staleness_zero_is_bit_identical_to_the_plain_loop(executor, plain_loop):
    outputs, state = plain_loop(synthetic.build_graph(CFG), synthetic.stream(6, CFG), {"qpu": get_backend("reference")})
    res = hq.run(synthetic.build_graph(CFG), synthetic.stream(6, CFG), backends={"qpu": emulated(per_job=0.002)},
                 executor=executor, window=4)
    assert res.outputs == outputs  # floats compared exactly
    np.testing.assert_array_equal(res.state["learn.weights"], state["learn.weights"])
    assert all(s.version == s.step for s in ok_execute_spans(res))
    if executor == "sync":  # reference(), which the tests below compare with, is this run on the numpy backend
        assert reference().outputs == outputs


@pytest.mark.parametrize("executor", ["sync", "local"])
def test_the_classifier_matches_the_plain_loop_with_the_same_seed(executor, plain_loop):
    """(Exact values: the classifier's circuit has no shots; test_sync_run.py compares a seeded shot graph.)"""
    from hqflow.workloads import classifier

    cfg = dataclasses.replace(classifier.Config(), steps=4)
    graph = classifier.build_graph(cfg)
    batches = list(classifier.minibatches(cfg, *classifier.make_data(cfg)[:2]))
    outputs, _ = plain_loop(graph, batches, {cfg.backend: get_backend(cfg.backend)}, seed=7)
    res = hq.run(graph, batches, seed=7, window=3, executor=executor)
    assert res.outputs == outputs


def test_sync_executor_runs_one_thing_at_a_time():
    res = hq.run(synthetic.build_graph(CFG), synthetic.stream(5, CFG), backends={"qpu": emulated(per_job=0.005)},
                 executor="sync")
    spans = sorted(res.spans, key=lambda s: s.start)
    assert all(a.end <= b.start + 1e-6 for a, b in zip(spans, spans[1:]))


def test_no_micro_batch_lost_or_doubled_under_injected_failures():
    cfg = dataclasses.replace(CFG, staleness=2)
    pool = [emulated(per_job=0.003, failure_rate=0.2, seed=1, name="flaky-a"),
            emulated(per_job=0.003, failure_rate=0.2, seed=2, name="flaky-b")]
    res = hq.run(synthetic.build_graph(cfg), synthetic.stream(40, cfg), backends={"qpu": pool}, window=6,
                 max_retries=10)
    assert len(res.outputs) == 40 and all(o is not None for o in res.outputs)
    assert res.extra["failed_jobs"] > 0 and res.extra["retries"] == res.extra["failed_jobs"]
    per_step = Counter(s.step for s in ok_execute_spans(res))
    assert per_step == Counter(range(40))  # exactly one successful job per micro-batch
    learned = Counter(s.step for s in res.spans if s.kind == "learn")
    assert learned == Counter(range(40))
    failed = [s for s in res.spans if s.outcome.kind == "error" and "injected" in s.outcome.message]
    assert len(failed) == res.extra["failed_jobs"]


def test_failures_at_staleness_zero_still_match_reference():
    res = hq.run(synthetic.build_graph(CFG), synthetic.stream(6, CFG), backends={"qpu": emulated(fail_jobs=(0, 2, 3))},
                 max_retries=3)
    assert res.outputs == reference().outputs
    assert res.extra["failed_jobs"] == 3


@pytest.mark.parametrize("k", [1, 2, 3])
def test_staleness_bound_is_never_exceeded(k):
    cfg = dataclasses.replace(CFG, staleness=k, repeats=30)
    res = hq.run(synthetic.build_graph(cfg), synthetic.stream(24, cfg), backends={"qpu": emulated(per_job=0.004, max_in_flight=4)},
                 window=8)
    spans = ok_execute_spans(res)
    lags = [s.step - s.version for s in spans]
    assert all(0 <= lag <= k for lag in lags)
    assert max(lags) >= 1  # producers did run ahead of the learner
    learn = [s for s in res.spans if s.kind == "learn"]
    assert all(s.version == s.step for s in learn)  # the learner's own state is never stale


def test_backpressure_bounds_admitted_steps_and_queues():
    cfg = dataclasses.replace(CFG, staleness=50)  # nothing but the window holds producers back
    res = hq.run(synthetic.build_graph(cfg), synthetic.stream(30, cfg), backends={"qpu": emulated(per_job=0.003)},
                 window=3)
    assert res.extra["max_admitted"] <= 3
    assert res.extra["max_job_queue"] <= 3
    assert len(res.outputs) == 30


def test_failed_job_is_retried_on_another_backend():
    broken = emulated(failure_rate=1.0, name="broken")
    good = emulated(per_job=0.002, name="good")
    res = hq.run(synthetic.build_graph(CFG), synthetic.stream(5, CFG), backends={"qpu": [broken, good]})
    assert res.outputs == reference(steps=5).outputs
    failed = [s for s in res.spans if s.outcome != "ok"]
    assert failed and all(s.lane == "qpu:broken#0" for s in failed)
    assert all(s.lane == "qpu:good#1" for s in ok_execute_spans(res))
    # every failed attempt was followed by an attempt of the same step on the other backend
    for f in failed:
        assert any(s.step == f.step and s.start >= f.end - 1e-6 for s in ok_execute_spans(res))


def test_hanging_job_times_out_and_is_retried():
    res = hq.run(synthetic.build_graph(CFG), synthetic.stream(3, CFG), backends={"qpu": emulated(hang_jobs=(1,))},
                 job_timeout=0.3)
    assert res.extra["timeouts"] == 1
    assert [s.outcome for s in res.spans if s.kind == "execute"].count("timeout") == 1
    assert res.outputs == reference(steps=3).outputs


def test_retries_exhausted_fail_the_run_with_a_clear_error():
    with pytest.raises(hq.FragmentError, match=r"fragment 'circuit' step 0: quantum job failed 3 times"):
        hq.run(synthetic.build_graph(CFG), synthetic.stream(2, CFG), backends={"qpu": emulated(failure_rate=1.0)},
               max_retries=2)


def test_batches_are_split_to_fit_and_rejoined():
    cfg = dataclasses.replace(CFG, batch=10)
    res = hq.run(synthetic.build_graph(cfg), synthetic.stream(3, cfg), backends={"qpu": emulated(max_circuits_per_job=3)})
    assert res.outputs == reference(cfg, steps=3).outputs
    assert Counter(s.step for s in ok_execute_spans(res)) == Counter({0: 4, 1: 4, 2: 4})


@pytest.mark.parametrize("executor", ["local", pytest.param("ray", marks=pytest.mark.ray)])
def test_rows_per_job_cuts_a_step_over_the_pool_and_changes_no_value(executor):
    if executor == "ray":
        pytest.importorskip("ray")
    cfg = dataclasses.replace(CFG, batch=10)
    pool = ["reference", "reference"] if executor == "ray" else [emulated(per_job=0.01, name="a"),
                                                                   emulated(per_job=0.01, name="b")]
    res = hq.run(synthetic.build_graph(cfg), synthetic.stream(3, cfg), backends={"qpu": pool}, rows_per_job=4,
                 executor=executor)
    assert res.outputs == reference(cfg, steps=3).outputs
    assert sorted(s.rows for s in ok_execute_spans(res) if s.step == 1) == [2, 4, 4]
    if executor == "local":  # a step's parts ran side by side on both members
        assert len({s.lane for s in ok_execute_spans(res)}) == 2
    with pytest.raises(ValueError, match="rows_per_job must be an integer >= 1"):
        hq.SchedulerConfig(rows_per_job=0)


def test_dispatch_prefers_the_faster_backend():
    cfg = dataclasses.replace(CFG, staleness=30)
    slow, fast = emulated(per_job=0.15, name="slow"), emulated(per_job=0.005, name="fast")
    res = hq.run(synthetic.build_graph(cfg), synthetic.stream(30, cfg), backends={"qpu": [slow, fast]}, window=8)
    lanes = Counter(s.lane for s in ok_execute_spans(res))
    assert lanes["qpu:fast#1"] >= 25 and lanes["qpu:slow#0"] <= 3


def test_several_qpus_run_micro_batches_concurrently():
    cfg = dataclasses.replace(CFG, staleness=20)
    pool = [emulated(per_job=0.05, name=f"q{k}") for k in range(4)]
    res = hq.run(synthetic.build_graph(cfg), synthetic.stream(12, cfg), backends={"qpu": pool}, window=12)
    spans = ok_execute_spans(res)
    assert len({s.lane for s in spans}) == 4
    overlapping = sum(1 for a in spans for b in spans if a is not b and a.start < b.end and b.start < a.end)
    assert overlapping > 0


def test_classical_and_quantum_work_overlap():
    cfg = dataclasses.replace(CFG, staleness=1, matrix=128, repeats=synthetic.calibrate(20, matrix=128))
    res = hq.run(synthetic.build_graph(cfg), synthetic.stream(10, cfg), backends={"qpu": emulated(per_job=0.02)})
    learn = [s for s in res.spans if s.kind == "learn"]
    qpu = ok_execute_spans(res)
    assert any(a.start < b.end and b.start < a.end for a in learn for b in qpu)


def test_fragment_error_stops_the_run_and_names_the_fragment():
    g = synthetic.build_graph(CFG)
    with pytest.raises(hq.FragmentError, match=r"fragment 'circuit' step 0: inputs for 'synthetic2' must have shape \[B, 2\]"):
        hq.run(g, [{"x": np.zeros((2, 5))}], backends={"qpu": emulated()})


@pytest.mark.ray
def test_ray_executor_matches_the_sync_executor():
    pytest.importorskip("ray")
    ref = reference()
    res = hq.run(synthetic.build_graph(CFG), synthetic.stream(6, CFG),
                 backends={"qpu": ("emulated-qpu", {"per_job": 0.002})}, executor="ray", ray_num_cpus=2)
    assert res.outputs == ref.outputs
    np.testing.assert_array_equal(res.state["learn.weights"], ref.state["learn.weights"])


@pytest.mark.ray
def test_ray_executor_survives_failures_without_losing_batches():
    pytest.importorskip("ray")
    cfg = dataclasses.replace(CFG, staleness=2)
    pool = [("emulated-qpu", {"failure_rate": 0.2, "seed": 3, "name": "ray-a"}),
            ("emulated-qpu", {"failure_rate": 0.2, "seed": 4, "name": "ray-b"})]
    res = hq.run(synthetic.build_graph(cfg), synthetic.stream(20, cfg), backends={"qpu": pool}, executor="ray",
                 ray_num_cpus=2, max_retries=10)
    assert Counter(s.step for s in ok_execute_spans(res)) == Counter(range(20))
    assert res.extra["failed_jobs"] > 0


@pytest.mark.ray
def test_ray_executor_refuses_backend_instances():
    pytest.importorskip("ray")
    with pytest.raises(ValueError, match="give 'emulated-qpu' as a name or \\(name, options\\)"):
        hq.Scheduler(synthetic.build_graph(CFG), {"qpu": emulated()}, hq.SchedulerConfig(executor="ray", ray_num_cpus=2))


@pytest.mark.parametrize("executor", ["sync", "local"])
def test_a_run_leaves_no_threads_behind(executor):
    """Backends the caller made (not closed by the run) included: an idle emulated QPU holds no threads."""
    import threading
    import time

    before = set(threading.enumerate())
    pool = [emulated(per_job=0.001, name=f"q{i}", max_in_flight=2) for i in range(3)]
    for _ in range(2):
        hq.run(synthetic.build_graph(CFG), synthetic.stream(4, CFG), backends={"qpu": pool}, executor=executor,
               job_timeout=30.0)
    deadline = time.time() + 5
    while (left := set(threading.enumerate()) - before) and time.time() < deadline:
        time.sleep(0.01)
    assert not left, sorted(t.name for t in left)
