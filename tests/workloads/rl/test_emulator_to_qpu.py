"""From the emulator to the QPU (issue 35, item 5): a run starts from another run's policy (``--init-from``), and an
evaluation on a priced target is priced before it runs (``--dry-run``), bounded (``--budget``) and recorded."""
import json

import pytest
import torch

from hqflow.cli import main
from hqflow.workloads.rl import evaluate, runner
from hqflow.workloads.rl.reinforce import Config
from hqflow.workloads.rl.rundir import RunDirError
from hqflow.workloads.rl.trained import price_evaluation

CFG = Config(n_layers=1, batch_episodes=2, max_episodes=4, seed=1)
ARIA = ("emulated-qpu", {"wrapped": "compiled", "price_as": "ionq.qpu.aria-1"})


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    run = tmp_path_factory.mktemp("pre") / "run"
    out = runner.train("reinforce", CFG, "sync", run_dir=run, checkpoint_every=1, tensorboard=False)
    return run, out


def test_a_run_starts_from_another_runs_policy(pretrained, tmp_path):
    run, out = pretrained
    cfg = Config(n_layers=1, batch_episodes=2, max_episodes=2, seed=7)
    tuned = runner.train("reinforce", cfg, "sync", run_dir=tmp_path / "tuned", init_from=run, tensorboard=False)
    fresh = runner.train("reinforce", cfg, "sync", run_dir=tmp_path / "fresh", tensorboard=False)
    start = torch.load(tmp_path / "tuned" / "init.pt", weights_only=True)
    assert all(torch.equal(start[k], out["params"][k]) for k in out["params"])
    assert tuned["returns"] != fresh["returns"]  # it acted with the pretrained policy, not the seed's
    # a resume before the first checkpoint starts from there again
    (tmp_path / "tuned" / "checkpoint.pt").unlink()
    again = runner.train("reinforce", resume=True, run_dir=tmp_path / "tuned", tensorboard=False)
    assert again["returns"] == tuned["returns"]
    assert all(torch.equal(again["params"][k], tuned["params"][k]) for k in tuned["params"])


def test_a_policy_of_another_shape_or_algorithm_is_refused_in_one_line(pretrained, tmp_path, capsys):
    run, _ = pretrained
    with pytest.raises(RunDirError, match=r"does not match this run's config: learn.params.weights is \[24\], "
                                          r"expected \[36\]"):
        runner.init_params(run, "reinforce", Config(n_layers=2))
    with pytest.raises(RunDirError, match="trained reinforce, not dqn"):
        runner.init_params(run, "dqn", runner.algorithm("dqn").Config(n_layers=1))
    assert main(["train", "cartpole", "--set", "n_layers=2", "--init-from", str(run), "--run-dir",
                 str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hqflow: error: --init-from:") and len(err.splitlines()) == 1
    assert main(["train", "--resume", str(run), "--init-from", str(run)]) == 2
    assert "--init-from" in capsys.readouterr().err


def test_an_evaluation_on_a_priced_target_is_priced_bounded_and_recorded(pretrained, capsys):
    run, _ = pretrained
    price = price_evaluation(run, 3, ARIA, shots=100)
    assert price["max_steps"] == 500 and price["per_step"] == 3 * 97.5 and price["at_most"] == 500 * 3 * 97.5
    figures = evaluate(run, episodes=3, backend=ARIA, shots=100, keep=True)
    used = figures["usage"]
    assert used["circuits"] == sum(figures["returns"])  # a row per running episode per step: CartPole pays 1 a step
    assert used["cost"] == 97.5 * used["circuits"] and used["shots"] == 100 * used["circuits"]  # Aria's minimum
    exact = evaluate(run, episodes=3)
    assert exact["usage"]["cost"] == 0 and len(exact["returns"]) == 3
    budget = 0.5 * used["cost"]
    argv = ["eval", str(run), "--episodes", "3", "--backend", "emulated-qpu", "--backend-opt", "wrapped=compiled",
            "--backend-opt", "price_as=ionq.qpu.aria-1", "--shots", "100"]
    capsys.readouterr()
    assert main([*argv, "--budget", str(budget), "--json"]) == 1
    out, err = capsys.readouterr()
    stopped = json.loads(out)
    assert stopped["stopped"] == "budget" and stopped["usage"]["cost"] <= budget
    assert stopped["usage"]["cost"] + 97.5 * 3 > budget or stopped["episodes"] < 3
    assert err.strip() == f"hqflow: evaluation stopped: its next step would pass --budget {budget:g}"
    lines = [json.loads(line) for line in (run / "evaluations.jsonl").read_text().splitlines()]
    assert [line["usage"] for line in lines] == [used, stopped["usage"]]  # every evaluation's usage, recorded
    assert main([*argv, "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith("at most 146,250.00 USD: 3 episodes side by side, up to 500 steps")
    assert main(["eval", str(run), "--dry-run"]) == 2  # the compiled simulator prices nothing
    assert "does not price its jobs" in capsys.readouterr().err
