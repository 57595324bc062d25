"""The multi-learner distribution: L learners share each update and end with sync's parameters
(float64: up to summation order), in threads and on Ray, and when a learner's process is killed."""
import os
import signal
import threading
import time

import pytest
import torch

from hqflow.engine.distribution import MultiLearner, get_distribution
from hqflow.workloads.rl import reinforce, runner

# 6 updates: enough for the summation order of a share to show in float64, and for a learner to be killed mid-run
EXACT = reinforce.Config(seed=3, max_episodes=60, batch_episodes=10, stop_when_solved=False, dtype="float64")


def _max_diff(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.fixture(scope="module")
def sync_run():
    return runner.train("reinforce", EXACT, "sync")


@pytest.mark.parametrize("learners", [2, 3])
def test_multi_learner_in_threads_ends_with_syncs_parameters(sync_run, learners):
    out = runner.train("reinforce", EXACT, MultiLearner(learners=learners, staleness=0, executor="local"))
    assert out["returns"] == sync_run["returns"]  # the same episodes, update after update
    assert len(out["returns"]) == EXACT.max_episodes and out["distribution"] == "multi-learner"
    assert _max_diff(out["params"], sync_run["params"]) <= 1e-8


def test_each_learner_differentiates_only_its_share_on_a_job_backend():
    """On a job backend the gradient is parameter-shift jobs: each learner submits its share's rows."""
    cfg = reinforce.Config(seed=1, max_episodes=20, batch_episodes=5, stop_when_solved=False, dtype="float64",
                           n_layers=1, backend="reference")
    ref = runner.train("reinforce", cfg, "sync")
    out = runner.train("reinforce", cfg, MultiLearner(learners=2, staleness=0, executor="local"))
    assert out["returns"] == ref["returns"]
    assert _max_diff(out["params"], ref["params"]) <= 1e-8
    # the record counts every learner's jobs, not rank 0's alone (34.5), as the spans do
    jobs = [s for s in out["spans"] if s.kind == "execute"]
    assert out["usage"]["service_jobs"] == len(jobs) > ref["usage"]["service_jobs"]
    assert out["usage"]["circuits"] == sum(s.rows for s in jobs) > ref["usage"]["circuits"] / 2


def test_float32_roundoff_is_why_exact_comparisons_use_float64():
    """The last layer's RZ gates commute with the Z readout: their true gradient is 0. In float32 the
    roundoff of a different summation order flips its sign, and Adam turns that into a step of lr."""
    cfg32 = reinforce.Config(seed=3, max_episodes=20, batch_episodes=10, stop_when_solved=False)
    a = runner.train("reinforce", cfg32, "sync")
    b = runner.train("reinforce", cfg32, MultiLearner(learners=2, staleness=0, executor="local"))
    assert a["returns"] == b["returns"]
    d = (a["params"]["weights"] - b["params"]["weights"]).abs()
    gauge = [3 * (5 * 4 + q) + 2 for q in range(4)]
    d[gauge] = 0
    assert float(d.max()) <= 1e-4


@pytest.mark.parametrize("compression", ["topk:0.1", "float16"])
def test_compressed_gradients_still_learn(compression):
    """Compression changes the result (it is not exact) but, with error feedback, CartPole still solves."""
    cfg = reinforce.Config(seed=1, max_episodes=600)
    out = runner.train("reinforce", cfg, MultiLearner(learners=2, staleness=0, executor="local",
                                                      compression=compression))
    assert out["episodes_to_solve"] is not None and out["episodes_to_solve"] <= 600


def test_the_policy_prints_and_validates():
    policy = get_distribution("multi-learner", learners=4, staleness=0)
    assert str(policy).startswith("MultiLearner(learners=4, staleness=0, actors=1, executor='ray'")
    cfg = policy.scheduler_config(seed=1)
    assert (cfg.learners, cfg.gpu_workers, cfg.executor) == (4, 4, "ray")
    with pytest.raises(ValueError, match="learners must be an integer >= 1"):
        MultiLearner(learners=0)
    with pytest.raises(ValueError, match="executor must be 'ray' or 'local'"):
        MultiLearner(executor="sync")


def _learner_pids() -> list[int]:
    import ray
    from hqflow.engine.executors.ray import _WORKERS

    return [ray.get(actor.pid.remote()) for key, actor in list(_WORKERS.items()) if key[3] == "gpu" and key[4] == 1]


def _calling(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return b"ray::_Worker.call" in fh.read()
    except OSError:
        return False


@pytest.mark.ray
@pytest.mark.slow
def test_on_ray_and_with_a_learner_killed_mid_step(sync_run):
    pytest.importorskip("ray")
    policy = MultiLearner(learners=2, staleness=0, executor="ray")
    clean = runner.train("reinforce", EXACT, policy, ray_num_cpus=2)
    assert clean["returns"] == sync_run["returns"]
    assert _max_diff(clean["params"], sync_run["params"]) <= 1e-8
    moved = clean["stats"]["bytes_moved"]  # each update's batch goes actor to learners, not through the driver
    assert moved["worker_to_worker"] > moved["workers_to_driver"] > 0 and moved["reduce"] > 0

    updates, killed, stop = [0], [], threading.Event()

    def kill_learner_1():
        """From update 2 on (of 6), SIGKILL learner rank 1's process while it runs a call (a learn step)."""
        while updates[0] < 2 and not stop.is_set():
            time.sleep(0.005)
        pids = _learner_pids()
        deadline = time.time() + 60
        while not killed and not stop.is_set() and time.time() < deadline:
            for pid in pids:
                if _calling(pid):
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
            time.sleep(0.002)

    watcher = threading.Thread(target=kill_learner_1, daemon=True)
    watcher.start()
    try:
        out = runner.train("reinforce", EXACT, policy, ray_num_cpus=2,
                           progress=lambda n, m: updates.__setitem__(0, updates[0] + 1))
    finally:
        stop.set()
        watcher.join()
    assert killed, "learner 1 was never caught in a step"
    assert _learner_pids() != killed  # replaced by a new process
    assert out["returns"] == sync_run["returns"]  # no update lost or applied twice
    assert _max_diff(out["params"], sync_run["params"]) <= 1e-8
    assert torch.isfinite(torch.cat([p.flatten() for p in out["params"].values()])).all()
