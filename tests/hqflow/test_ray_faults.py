"""Runs on the ray executor survive dead actors: a killed worker's call is redone, a killed backend's
job is retried, a hung backend is restarted, a dead cached worker is replaced; Ray's errors are one line."""
import time

import numpy as np
import pytest

import hqflow as hq
from hqflow.backends import get_backend
from hqflow.workloads import synthetic

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray")

CFG = synthetic.Config(staleness=0, backend="qpu", matrix=128, repeats=1500)  # a learner step of about 0.3 s
FAST = synthetic.Config(staleness=0, backend="qpu", repeats=1)
STEPS = 8


def _reference(cfg=CFG, steps=STEPS):
    """The sync executor on the exact numpy backend: one thing at a time, undisturbed."""
    return hq.run(synthetic.build_graph(cfg), synthetic.stream(steps, cfg), backends={"qpu": get_backend("reference")},
                  executor="sync")


def _on_ray(cfg, steps=STEPS, **backend_options):
    """The synthetic pipeline under the ray executor, on one emulated QPU."""
    return hq.run(synthetic.build_graph(cfg), synthetic.stream(steps, cfg), backends={"qpu": ("emulated-qpu", backend_options)},
                  executor="ray", ray_num_cpus=2)


def _same(res, ref):
    assert res.outputs == ref.outputs  # floats compared exactly: nothing lost, nothing doubled
    np.testing.assert_array_equal(res.state["learn.weights"], ref.state["learn.weights"])


def test_a_killed_worker_actor_redoes_its_call(kill_ray_process):
    ref = _reference()
    killer = kill_ray_process("ray::_Worker.call", after=0.5)
    res = _on_ray(CFG, per_job=0.002)
    killer.join()
    assert killer.killed, "no worker was running a call to kill"
    _same(res, ref)


def test_a_killed_backend_actor_is_restarted_and_its_job_retried(kill_ray_process):
    ref = _reference(FAST)
    killer = kill_ray_process("ray::_BackendActor.run", after=0.5)
    res = _on_ray(FAST, per_job=0.3)
    killer.join()
    assert killer.killed, "no backend was running a job to kill"
    _same(res, ref)
    assert res.extra["failed_jobs"] >= 1


def test_a_job_sent_while_a_lost_backend_starts_again_waits_for_it(tmp_path):
    """Ray fails a call made while an actor's process starts again; on a busy machine that start takes
    seconds, and the job service's retries were used up on it (RetriesExhausted). Here the second
    start takes 5 s whatever the machine's load, and the job sent just after the loss still runs."""
    import os
    import signal
    import time

    from hqflow.backends import CircuitBatch
    from hqflow.engine.executors.actors import _BackendActor
    from hqflow.engine.executors.ray import RayExecutor
    from hqflow.ir import Circuit

    RayExecutor(num_cpus=2)  # this process's Ray
    marker = str(tmp_path / "started")

    class SlowSecondStart(_BackendActor):
        def __init__(self, name, options):
            if os.path.exists(marker):
                time.sleep(5)
            open(marker, "w").close()
            super().__init__(name, options)

        def pid(self):
            return os.getpid()

    from hqflow.engine.executors.ray import _RayHandle

    handle = _RayHandle(SlowSecondStart, ("emulated-qpu", {"per_job": 0.5}), 1)
    template = Circuit(1).rx(0.3, 0).build(observables=["Z0"])
    batch = CircuitBatch.make(template, np.zeros((1, 0)), np.zeros(0))
    first = ray.get(handle.actor.pid.remote())
    lost = handle.submit(batch)
    time.sleep(0.2)
    os.kill(first, signal.SIGKILL)
    with pytest.raises(RuntimeError, match="Actor"):
        lost.result()
    again = handle.submit(batch)  # as the job service's retry does, at once
    np.testing.assert_allclose(again.result().values[0], np.cos(0.3), atol=1e-12)
    assert ray.get(handle.actor.pid.remote()) != first
    ray.kill(handle.actor, no_restart=True)


def _dead(actor, wait: float = 120.0) -> None:
    """Return once Ray reports ``actor`` dead (a call on it fails so)."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            ray.get(actor.ready.remote(), timeout=wait)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.05)
    pytest.fail("the killed worker still answers")


def test_a_dead_cached_worker_is_replaced_by_the_next_run():
    from hqflow.engine.executors.ray import _WORKERS

    ref = _reference(FAST)
    _on_ray(FAST, steps=1)
    for actor in list(_WORKERS.values()):
        ray.kill(actor, no_restart=True)  # dead for good, still in the cache
        _dead(actor)  # (ray.kill is asynchronous: a worker dying while the next run starts is another case)
    res = _on_ray(FAST)
    _same(res, ref)


def test_a_hung_backend_actor_is_restarted_after_a_timeout():
    """Job 2 of the backend hangs. A call in an actor cannot be interrupted, so without a restart
    every later job waits behind it and times out too, and the run fails."""
    cfg = FAST
    res = hq.run(synthetic.build_graph(cfg), synthetic.stream(4, cfg),
                 backends={"qpu": ("emulated-qpu", {"hang_jobs": [2]})}, executor="ray", ray_num_cpus=2,
                 job_timeout=5.0, max_retries=6)
    assert res.outputs == _reference(cfg, 4).outputs
    assert res.extra["timeouts"] >= 1
    assert res.extra["timeouts"] <= 3  # the restarted backend's own jobs 0 and 1 ran


def _fails(x):
    raise ValueError("bad value\nsecond line")


def test_a_fragments_error_is_its_own_in_one_line():
    pipe = hq.Pipeline("fails")
    pipe.input("x", "array")
    pipe.preprocess(_fails, outputs=("y",))
    pipe.connect("input.x", "_fails.x")
    pipe.output("_fails.y")
    with pytest.raises(hq.FragmentError) as info:
        hq.run(pipe.build(), [{"x": np.zeros(2)}], executor="ray", ray_num_cpus=2)
    message = str(info.value)
    assert "bad value\\nsecond line" in message and "\n" not in message and "Traceback" not in message
    assert "ValueError" in message and "RayTaskError" not in message
