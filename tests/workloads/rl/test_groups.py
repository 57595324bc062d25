"""RL actors in groups on a job backend: every job goes through the scheduler's pool, results do not
depend on timing (sync and pipelined at staleness 0 agree bit for bit), a flaky QPU changes nothing,
and a run whose jobs run out of retries keeps its checkpoint and resumes."""
import pytest
import torch

import hqflow as hq
from hqflow.workloads.rl import reinforce, runner


def _qpu(name, **options):
    return ("emulated-qpu", dict(wrapped="compiled", name=name, **options))


def _cfg(**kw):
    base = dict(seed=1, backend="qpu", max_episodes=12, batch_episodes=4, n_layers=1, stop_when_solved=False)
    return reinforce.Config(**{**base, **kw})


def _same(a, b):
    assert a["returns"] == b["returns"]
    assert all(torch.equal(a["params"][k], b["params"][k]) for k in a["params"])


def test_defaults_on_a_job_backend_are_groups_per_device_with_autoreset():
    cfg = reinforce.resolve(_cfg(), in_process=False, devices=2)
    assert (cfg.groups, cfg.num_envs, cfg.autoreset) == (2, 8, True)
    cfg = reinforce.resolve(_cfg(backend="compiled"), in_process=True, devices=1)
    assert (cfg.groups, cfg.num_envs, cfg.autoreset) == (1, 4, False)


def test_split_and_bad_group_settings():
    assert reinforce.split(10, 3) == [4, 3, 3]
    with pytest.raises(ValueError, match="groups"):
        reinforce.Config(groups=11, batch_episodes=10)
    with pytest.raises(ValueError, match="num_envs"):
        reinforce.Config(groups=3, num_envs=2)


@pytest.mark.parametrize("autoreset", [False, True])
def test_groups_are_bit_identical_across_distributions(autoreset):
    cfg = _cfg(groups=2, autoreset=autoreset)
    pool = {"qpu": [_qpu("a", per_job=0.002), _qpu("b", per_job=0.004)]}
    a = runner.train("reinforce", cfg, "sync", backends=pool)
    b = runner.train("reinforce", cfg, hq.distribution.get_distribution("pipelined", staleness=0), backends=pool)
    _same(a, b)
    assert len(a["returns"]) == 12
    jobs = [s for s in a["spans"] if s.resource == "qpu:qpu"]
    assert {s.fragment for s in jobs} == {"rollout", "learn"} and all(s.parent_lane for s in jobs)
    assert {s.row for s in jobs} == {"qpu:a#0", "qpu:b#1"}  # both QPUs used
    if autoreset:  # every actor job is full: one row per env of its group
        assert a["circuit_evals"] % 2 == 0
    # each group's environment work is a span of its own, parented by the rollout's lane
    rollout_lanes = {s.row for s in a["spans"] if s.kind == "preprocess" and s.parent_lane is None}
    work = [s for s in a["spans"] if s.parent_lane is not None and s.resource == "cpu"]
    assert {s.row for s in work} == {f"{lane}/envs{g}" for lane in rollout_lanes for g in (0, 1)}
    assert hq.trace.overlap_seconds(b["spans"]) > 0  # environments stepped while jobs were in flight


def test_a_flaky_qpu_changes_nothing():
    cfg = _cfg(groups=2)
    healthy = runner.train("reinforce", cfg, "sync", backends={"qpu": [_qpu("a"), _qpu("b", seed=3)]})
    flaky = runner.train("reinforce", cfg, "sync", max_retries=8,
                         backends={"qpu": [_qpu("a"), _qpu("b", seed=3, failure_rate=0.3)]})
    _same(healthy, flaky)
    assert any(s.outcome != "ok" for s in flaky["spans"])


def test_exhausted_retries_keep_the_checkpoint_and_resume(tmp_path):
    cfg = _cfg(groups=2)
    reference = runner.train("reinforce", cfg, "sync", backends={"qpu": [_qpu("a")]})
    run = tmp_path / "run"
    with pytest.raises(hq.RunFailed, match="failed"):
        runner.train("reinforce", cfg, "sync", run_dir=run, checkpoint_every=1, max_retries=1,
                     backends={"qpu": [_qpu("a", fail_jobs=tuple(range(25, 10_000)))]})
    meta, ckpt = runner.load_run(run)
    assert ckpt is not None and ckpt["update"] >= 0
    assert (run / "spans.json").is_file()
    resumed = runner.train("reinforce", run_dir=run, resume=True, backends={"qpu": [_qpu("a")]})
    _same(reference, resumed)


def test_cli_backend_options_and_a_failing_pool(tmp_path, capsys):
    from hqflow.cli import main

    run = str(tmp_path / "r")
    code = main(["train", "cartpole", "--backend", "emulated-qpu", "--backend-opt", "wrapped=compiled",
                 "--backend-opt", "failure_rate=1.0", "--set", "n_layers=1", "--episodes", "4", "--run-dir", run])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 2 and "--resume" in err[1]  # the failure, after what a step costs
    assert err[0].startswith("hqflow: an environment step runs about 58 circuits on emulated-qpu")
    assert main(["train", "cartpole", "--backend", "emulated-qpu", "--backend-opt", "bogus=1"]) == 2
    assert "bogus" in capsys.readouterr().err


def test_actor_groups_run_on_daemon_threads_so_ctrl_c_does_not_wait_for_them():
    """Python joins a non-daemon thread at exit: a group still waiting on a QPU job would hold a Ctrl-C'd run's
    exit until its episode ends. The first group runs on the caller's thread, the others on daemon threads."""
    import threading

    seen = reinforce.run_groups(lambda item: (item, threading.current_thread().daemon), [0, 1, 2])
    assert seen == [(0, threading.current_thread().daemon), (1, True), (2, True)]
