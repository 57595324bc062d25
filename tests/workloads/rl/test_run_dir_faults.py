"""Damaged and interrupted run directories: one line naming the file (exit 2), or a resume that loses nothing; and
run directories written before checkpoint.pt was the engine's format resume bit for bit."""
import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from hqflow.cli import main
from hqflow.engine.ports import PortRef
from hqflow.workloads.rl import runner

ARGS = ["--set", "n_layers=1", "--set", "batch_episodes=5", "--no-tensorboard"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    run = tmp_path_factory.mktemp("runs") / "run"
    assert main(["train", "cartpole", "--episodes", "20", "--run-dir", str(run), "--checkpoint-every", "1",
                 "--set", "stop_when_solved=false", *ARGS]) == 0
    return run


def _copy(finished, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    return run


def _legacy(run) -> dict:
    """The run's checkpoint as hqflow wrote checkpoint.pt before it kept the engine's format: ``torch.save`` of the
    trainer's record, ``"state"`` (the newest loop values by name) and ``"stale"`` (the older parameters that
    rollouts at staleness > 0 take). The tests below edit it and save it back so."""
    ck = runner.load_run(run)[1]
    saved = ck.pop("saved")
    ck["stale"] = {v: p for v, p in saved["state"][PortRef("learn", "params")].values.items() if v < saved["steps"]}
    return ck


def _err(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("name, damage, message", [
    ("checkpoint.pt", lambda p: p.write_bytes(p.read_bytes()[:100]), "checkpoint.pt is damaged"),
    ("checkpoint.pt", lambda p: p.write_bytes(os.urandom(300)), "checkpoint.pt is damaged"),
    ("checkpoint.pt", lambda p: torch.save({"update": 1}, p), "checkpoint.pt is damaged: it holds no training state"),
    ("config.json", lambda p: p.write_text("[1, 2]"), "config.json is damaged"),
    ("config.json", lambda p: p.write_text("{}"), "config.json is damaged"),
    ("config.json", lambda p: p.write_text("null"), "config.json is damaged"),
    ("config.json", lambda p: p.write_bytes(b"\xff\xfe\x00"), "config.json is damaged"),
    ("config.json", lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "algo": "sarsa"})),
     "unknown algorithm 'sarsa'"),
])
def test_a_damaged_file_is_named_in_one_line(name, damage, message, finished, tmp_path, capsys):
    run = _copy(finished, tmp_path)
    ck = _legacy(run)
    ck["update"] = 0  # not complete: the resume reads everything
    torch.save(ck, run / "checkpoint.pt")
    damage(run / name)
    assert main(["train", "--resume", str(run)]) == 2
    assert message in _err(capsys)


def test_parameters_of_the_wrong_shape_are_named(finished, tmp_path, capsys):
    run = _copy(finished, tmp_path)
    ck = _legacy(run)
    ck["update"] = 0
    key = next(iter(ck["state"]["learn.params"]))
    ck["state"]["learn.params"][key] = torch.zeros(7, 3)
    torch.save(ck, run / "checkpoint.pt")
    assert main(["train", "--resume", str(run)]) == 2
    assert f"does not match its run's config: learn.params.{key} is [7, 3]" in _err(capsys)


def test_metrics_are_rewritten_from_the_checkpoint_on_resume(finished, tmp_path, capsys):
    run = _copy(finished, tmp_path)
    ck = _legacy(run)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in ck["metrics"]] == [r["update"] for r in rows]
    ck2 = dict(ck, update=1, metrics=ck["metrics"][:2], returns=sum((r["returns"] for r in ck["metrics"][:2]), []))
    torch.save(ck2, run / "checkpoint.pt")
    (run / "metrics.jsonl").unlink()  # deleted: the checkpoint still has the rows
    assert main(["train", "--resume", str(run)]) == 0
    again = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in again] == [r["update"] for r in rows]


def test_a_half_written_last_line_is_dropped_and_a_short_file_is_refused(finished, tmp_path, capsys):
    run = _copy(finished, tmp_path)
    ck = _legacy(run)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    old = {k: v for k, v in ck.items() if k != "metrics"}  # a checkpoint from before rows were kept in it
    old.update(update=1, returns=ck["returns"][:json.loads(lines[1])["episodes"]])  # as it stood after update 1
    torch.save(old, run / "checkpoint.pt")
    (run / "metrics.jsonl").write_text("\n".join(lines[:2]) + '\n{"update": 2, "retu')
    assert main(["train", "--resume", str(run)]) == 0
    assert len((run / "metrics.jsonl").read_text().splitlines()) == len(lines)
    capsys.readouterr()
    torch.save(old, run / "checkpoint.pt")
    (run / "metrics.jsonl").write_text(lines[0] + "\n")
    assert main(["train", "--resume", str(run)]) == 2
    assert "metrics.jsonl has 1 rows where the checkpoint has 2 updates" in _err(capsys)


def test_resume_of_a_finished_run_says_it_is_complete(finished, capsys):
    before = (finished / "metrics.jsonl").read_text()
    assert main(["train", "--resume", str(finished)]) == 0
    assert "is complete" in _err(capsys)
    assert (finished / "metrics.jsonl").read_text() == before


def test_a_run_killed_before_its_first_checkpoint_resumes_from_the_start(finished, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(finished / "config.json", run / "config.json")
    assert main(["train", "--resume", str(run)]) == 0
    assert "no checkpoint yet" in capsys.readouterr().err
    a = [json.loads(x)["returns"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    b = [json.loads(x)["returns"] for x in (finished / "metrics.jsonl").read_text().splitlines()]
    assert a == b


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only directories")
def test_a_read_only_run_directory_is_a_one_line_error(finished, tmp_path, capsys):
    run = _copy(finished, tmp_path)
    ck = _legacy(run)
    torch.save(dict(ck, update=0, metrics=ck["metrics"][:1]), run / "checkpoint.pt")
    os.chmod(run, 0o500)
    try:
        assert main(["train", "--resume", str(run)]) == 2
        assert "cannot write the run directory" in _err(capsys)
    finally:
        os.chmod(run, 0o700)


def test_an_unsolved_run_says_so_in_words(tmp_path, capsys):
    assert main(["train", "cartpole", "--episodes", "5", "--run-dir", str(tmp_path / "r"), *ARGS]) == 0
    out = capsys.readouterr().out
    assert "episodes_to_solve      not within 5 episodes" in out and "None" not in out


def test_a_run_directory_written_before_the_engine_s_format_resumes_bit_for_bit(tmp_path):
    """legacy_run/: a run directory that hqflow wrote before checkpoint.pt was the engine's format (at d304e22:
    ``runner.train("reinforce", reinforce.Config(seed=4, n_layers=1, batch_episodes=1, max_episodes=6,
    stop_when_solved=False, autoreset=True), Pipelined(staleness=1), run_dir=..., checkpoint_every=2)`` stopped by
    Ctrl-C after update 2; its checkpoint pickles envs.EnvSpec, envs.ScaledEncoder and reinforce.Carry and keeps
    the parameters of update 1 for the next rollout). Resumed, it ends as that hqflow's uninterrupted run did
    (``expected.json``), in the engine's format."""
    run = tmp_path / "run"
    shutil.copytree(Path(__file__).parent / "legacy_run", run)
    expected = json.loads((run / "expected.json").read_text())
    before = runner.load_run(run)[1]
    assert before["update"] == 2 and before["saved"]["state"][PortRef("learn", "params")].values.keys() == {2, 3}
    out = runner.train(run_dir=run, resume=True, tensorboard=False)
    params = hashlib.sha256(b"".join(out["params"][k].detach().numpy().tobytes() for k in sorted(out["params"])))
    assert (out["returns"], out["updates"], params.hexdigest()) == (expected["returns"], expected["updates"],
                                                                    expected["params"])
    after = runner.load_run(run)[1]
    assert after["update"] == 5 and after["returns"] == expected["returns"] and after["saved"]["version"] == 4
    assert [json.loads(line)["update"] for line in (run / "metrics.jsonl").read_text().splitlines()] == list(range(6))
