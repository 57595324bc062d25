"""Quantum jobs that a classical fragment runs itself (``job_span``) show in the run's spans,
on every executor, at the right place on the run's clock; and the overlap measure counts a
fragment blocked on its own job as quantum time, not classical time."""
import time

import numpy as np
import pytest

import hqflow as hq
from hqflow.fragments import job_span
from hqflow.trace import Span, overlap_fraction, overlap_seconds


def actor(step):
    """A fragment that computes 20 ms, then waits 30 ms on a job it submits itself."""
    time.sleep(0.02)
    with job_span("fake-qpu"):
        time.sleep(0.03)
    return {"y": step}


def failing_job(step):
    with job_span("fake-qpu"):
        raise RuntimeError("device lost")


def _graph(fn):
    pipe = hq.Pipeline("jobs")
    pipe.input("step", "scalar")
    pipe.preprocess(fn, outputs={"y": "scalar"})
    pipe.output(f"{fn.__name__}.y")
    return pipe.build()


@pytest.mark.parametrize("executor", ["sync", "local", "reference"])
def test_a_fragments_own_jobs_are_spans_inside_its_span(executor):
    g = _graph(actor)
    stream = ({"step": i} for i in range(3))
    if executor == "reference":
        result = hq.run_reference(g, stream)
    else:
        result = hq.run(g, stream, config=hq.SchedulerConfig(executor=executor))
    assert result.column("y") == [0, 1, 2]
    frags = {s.step: s for s in result.spans if s.fragment == "actor"}
    jobs = {s.step: s for s in result.spans if s.fragment == "actor/job"}
    assert sorted(jobs) == [0, 1, 2]
    for step, job in jobs.items():
        outer = frags[step]
        assert job.kind == "execute" and job.resource == "qpu:fake-qpu" and job.outcome == "ok"
        assert job.row == f"qpu:fake-qpu/{outer.row}"  # the lane of the worker that submitted it
        assert outer.start + 0.015 <= job.start and job.end <= outer.end + 1e-3
        assert 0.025 <= job.seconds <= outer.seconds


def test_a_job_that_raises_fails_the_fragment_with_its_error():
    with pytest.raises(hq.FragmentError, match="device lost"):
        hq.run(_graph(failing_job), iter([{"step": 0}]), config=hq.SchedulerConfig(executor="sync"))


def test_job_span_outside_a_fragment_does_nothing():
    with job_span("fake-qpu"):
        value = 1 + 1
    assert value == 2


def test_overlap_counts_a_lane_blocked_on_its_own_job_as_quantum_only():
    # cpu/0 runs 0..10 and waits on its own job 4..10; the learner (gpu/0) runs 5..8
    spans = [Span("actor", "preprocess", "cpu", 0, 0.0, 10.0, lane="cpu/0"),
             Span("actor/job", "execute", "qpu:q", 0, 4.0, 10.0, lane="qpu:q/cpu/0")]
    assert overlap_seconds(spans) == 0.0  # a fragment waiting on its job is not classical work
    spans.append(Span("learn", "learn", "gpu", 0, 5.0, 8.0, lane="gpu/0"))
    assert overlap_seconds(spans) == pytest.approx(3.0)
    assert overlap_fraction(spans) == pytest.approx(3.0 / 6.0)  # classical busy: 0..4 and 5..8 = 7 s; quantum 6 s
    # a job submitted from another lane does not hide this lane's own work
    other = [Span("actor", "preprocess", "cpu", 0, 0.0, 10.0, lane="cpu/0"),
             Span("actor/job", "execute", "qpu:q", 0, 4.0, 10.0, lane="qpu:q/cpu/1")]
    assert overlap_seconds(other) == pytest.approx(6.0)


def test_rl_run_on_a_job_backend_traces_the_actors_and_learners_jobs(tmp_path):
    from hqflow.workloads.rl import reinforce, runner

    cfg = reinforce.Config(seed=0, backend="reference", max_episodes=2, batch_episodes=2, n_layers=1,
                           stop_when_solved=False)
    out = runner.train("reinforce", cfg, "sync", run_dir=tmp_path / "run")
    jobs = [s for s in out["spans"] if s.resource == "qpu:reference"]
    assert {s.fragment for s in jobs} == {"rollout/job", "learn/job"}
    # one batched no-grad forward per time step of the wave of 2 episodes, one gradient job
    assert len([s for s in jobs if s.fragment == "rollout/job"]) == max(out["returns"])
    assert len([s for s in jobs if s.fragment == "learn/job"]) == 1
    assert np.all([s.outcome == "ok" for s in jobs])
    assert (tmp_path / "run" / "spans.json").read_text().count("rollout/job") == len(
        [s for s in jobs if s.fragment == "rollout/job"])
