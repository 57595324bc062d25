"""Training on a paid target (issue 25): shots and SPSA as settings of every algorithm, results that do not
depend on packing or timing, and a cost record that equals the price table's formula over the run's jobs."""
import json
import re

import numpy as np
import pytest
import torch
from hqflow.backends.azure import cost

from hqflow.cli import main
from hqflow.engine.distribution import Pipelined
from hqflow.workloads.rl import dqn, ppo, reinforce, runner
from hqflow.workloads.rl.policies import pqc_template

R = reinforce.Config


def qpu(**options):
    """A one-member pool of the emulated QPU over the compiled simulator."""
    return {"qpu": [("emulated-qpu", {"wrapped": "compiled", "per_job": 0.0, **options})]}


def same(a: dict, b: dict) -> bool:
    return a["returns"] == b["returns"] and all(torch.equal(a["params"][k], b["params"][k]) for k in a["params"])


@pytest.mark.parametrize("bad, says", [({"gradient": "foo"}, "unknown gradient 'foo'"), ({"shots": 0}, "shots"),
                                       ({"spsa_samples": 0}, "spsa_samples"), ({"spsa_epsilon": 0.0}, "spsa_epsilon")])
def test_bad_settings_are_one_line_errors(bad, says):
    with pytest.raises(ValueError, match=says):
        R(**bad)


@pytest.mark.parametrize("flag", [["--shots", "0"], ["--gradient", "foo"], ["--shot-budget", "-1"],
                                  ["--spsa-epsilon", "9"]])
def test_bad_flags_exit_2(flag, capsys, tmp_path):
    assert main(["train", "cartpole", "--run-dir", str(tmp_path / "x"), *flag]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag[0] in err[0], err
    assert not (tmp_path / "x").exists()


def test_circuits_per_step_follow_the_gradient():
    assert runner.circuits_per_env_step("reinforce", R())[0] == 186  # 1 to act + 1 + 2 x 92
    assert runner.circuits_per_env_step("reinforce", R(gradient="spsa", spsa_samples=2))[0] == 5
    assert runner.circuits_per_env_step("reinforce", R(gradient="spsa", spsa_samples=3))[0] == 7


def test_shots_in_process_are_a_function_of_the_seed():
    cfg = R(shots=200, n_layers=1, batch_episodes=4, max_episodes=8, seed=4)
    a, b = runner.train("reinforce", cfg, "sync"), runner.train("reinforce", cfg, "sync")
    assert same(a, b)
    assert a["usage"]["shots"] > 0 and a["usage"]["shots"] == 200 * a["usage"]["circuits"]
    exact = runner.train("reinforce", R(n_layers=1, batch_episodes=4, max_episodes=8, seed=4), "sync")
    assert exact["returns"] != a["returns"] or not all(torch.equal(exact["params"][k], a["params"][k])
                                                       for k in a["params"])  # the shots are really sampled


@pytest.mark.parametrize("algo, cfg", [
    ("reinforce", R(gradient="spsa", shots=100, n_layers=1, batch_episodes=2, max_episodes=4, seed=1)),
    ("ppo", ppo.Config(gradient="spsa", shots=100, n_layers=1, num_envs=2, num_steps=16, max_episodes=2, seed=1,
                       update_epochs=1)),
    ("dqn", dqn.Config(gradient="spsa", shots=100, n_layers=1, max_episodes=2, seed=1, train_every=5)),
])
def test_spsa_with_shots_trains_every_algorithm_on_a_job_backend(algo, cfg):
    cfg = type(cfg)(**{**cfg.__dict__, "backend": "qpu"})
    out = runner.train(algo, cfg, "sync", backends=qpu())
    assert out["updates"] >= 1 and out["returns"]
    assert all(torch.isfinite(v).all() for v in out["params"].values())
    assert out["usage"]["service_jobs"] > 0 and out["usage"]["shots"] == 100 * out["usage"]["circuits"]


def test_packing_does_not_change_what_is_learned():
    cfg = R(gradient="spsa", shots=300, n_layers=1, batch_episodes=3, max_episodes=6, seed=2, backend="qpu",
            stop_when_solved=False)
    packed = runner.train("reinforce", cfg, "sync", backends=qpu())
    single = runner.train("reinforce", cfg, "sync", backends=qpu(max_circuits_per_job=1))
    assert same(packed, single)
    assert single["usage"]["service_jobs"] == single["usage"]["circuits"] == packed["usage"]["circuits"]
    assert packed["usage"]["service_jobs"] < packed["usage"]["circuits"] / 4


def test_groups_and_pipelining_do_not_change_what_is_learned():
    cfg = R(shots=200, n_layers=1, batch_episodes=4, max_episodes=8, seed=3, groups=2, autoreset=True,
            backend="qpu", stop_when_solved=False)
    assert same(runner.train("reinforce", cfg, "sync", backends=qpu(max_in_flight=2)),
                runner.train("reinforce", cfg, Pipelined(staleness=0), backends=qpu(max_in_flight=2)))


def test_a_resumed_run_with_shots_is_the_undisturbed_one(tmp_path):
    cfg = R(gradient="spsa", shots=100, n_layers=1, batch_episodes=2, max_episodes=8, seed=5, stop_when_solved=False)
    whole = runner.train("reinforce", cfg, "sync", run_dir=tmp_path / "whole", tensorboard=False)
    calls = []

    def stop(_n, _shown):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        runner.train("reinforce", cfg, "sync", run_dir=tmp_path / "cut", checkpoint_every=1, progress=stop,
                     tensorboard=False)
    resumed = runner.train("reinforce", cfg, "sync", run_dir=tmp_path / "cut", resume=True, tensorboard=False)
    assert same(whole, resumed)
    assert resumed["usage"] == whole["usage"]  # the totals survive the resume


def test_the_cost_record_is_the_price_tables_formula_over_the_jobs(tmp_path, capsys):
    """Priced as IonQ Aria (one circuit per service job): every circuit costs max(shots (p1 N1 + p2 N2), minimum)."""
    run_dir = tmp_path / "run"
    argv = ["train", "cartpole", "--backend", "emulated-qpu", "--backend-opt", "wrapped=compiled", "--backend-opt",
            "per_job=0", "--backend-opt", "price_as=ionq.qpu.aria-1", "--set", "n_layers=1", "--set",
            "batch_episodes=2", "--episodes", "4", "--shots", "100", "--run-dir", str(run_dir), "--json",
            "--no-tensorboard"]
    assert main(argv) == 0, capsys.readouterr().err
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    price = cost.load_prices()["targets"]["ionq.qpu.aria-1"]
    template = pqc_template(4, 1)
    (n1, n2, _), = cost.template_counts(template, "ionq")  # one measurement group: its billed 1q and 2q gates
    per_circuit = max(100 * (price["price_1q"] * n1 + price["price_2q"] * n2), price["minimum"])
    assert figures["list_cost"] == pytest.approx(figures["circuits"] * per_circuit, rel=1e-9)
    assert figures["currency"] == "USD"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert sum(r["list_cost"] for r in rows) == pytest.approx(rows[-1]["list_cost_total"], rel=1e-9)
    assert sum(r["service_jobs"] for r in rows) == rows[-1]["service_jobs_total"] == figures["service_jobs"]
    assert sum(r["shots"] for r in rows) == rows[-1]["shots_total"] == 100 * figures["circuits"]
    assert np.isclose(rows[-1]["list_cost_total"], figures["list_cost"])


def test_a_shot_budget_stops_the_run_resumable(tmp_path, capsys):
    run_dir = tmp_path / "run"
    argv = ["train", "cartpole", "--backend", "emulated-qpu", "--backend-opt", "wrapped=compiled", "--backend-opt",
            "per_job=0", "--set", "n_layers=1", "--set", "batch_episodes=2", "--episodes", "40", "--shots", "10",
            "--checkpoint-every", "1", "--run-dir", str(run_dir), "--no-tensorboard"]
    assert main([*argv, "--shot-budget", "20000"]) == 1
    err = capsys.readouterr().err
    assert "shot budget reached" in err and "raise --shot-budget" in err
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows and rows[-1]["shots_total"] <= 20000 and rows[-1]["episodes"] < 40
    assert main(["train", "--resume", str(run_dir), "--json"]) == 0  # no budget: it goes on to the end
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["episodes"] >= 40


def test_a_shot_budget_needs_a_job_backend(tmp_path, capsys):
    assert main(["train", "cartpole", "--shots", "10", "--shot-budget", "100", "--run-dir", str(tmp_path / "r")]) == 2
    assert "--shot-budget counts the shots of a job backend" in capsys.readouterr().err


def test_a_dry_run_submits_nothing_and_projects_the_run(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["train", "cartpole", "--backend", "emulated-qpu", "--backend-opt", "per_job=0", "--set", "n_layers=1",
            "--set", "batch_episodes=2", "--shots", "50", "--episodes", "100", "--dry-run", "--json"]
    assert main(argv) == 0, capsys.readouterr().err
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["dry_run_updates"] == 1 and figures["dry_run_episodes"] == 2
    assert figures["shots_per_episode"] == 50 * figures["circuits_per_episode"] > 0
    assert figures["circuits_for_100_episodes"] == pytest.approx(100 * figures["circuits_per_episode"], rel=1e-3)
    assert figures["circuits_bound_at_500_steps"] >= figures["circuits_for_100_episodes"]
    assert not (tmp_path / "runs").exists()  # no run directory is kept
    assert main([*argv, "--resume", "x"]) == 2


@pytest.mark.parametrize("flags", [["--shots", "10"], ["--gradient", "spsa"], ["--objective", "cost"]])
def test_a_resume_refuses_settings_it_would_ignore(flags, tmp_path, capsys):
    assert main(["train", "--resume", str(tmp_path), *flags]) == 2
    assert "cannot change" in capsys.readouterr().err


def test_a_budget_stop_and_its_resume_keep_one_count_and_print_money_plainly(tmp_path, capsys):
    """34.5 and 34.7: the rows count the updates' jobs (spend = list_cost_total, circuits_total); what a stop cut
    short is paid and said; the rate line is this process's update's; money has two decimals and separators."""
    run_dir = tmp_path / "run"
    argv = ["train", "cartpole", "--backend", "emulated-qpu", "--backend-opt", "wrapped=compiled", "--backend-opt",
            "per_job=0", "--backend-opt", "price_as=ionq.qpu.aria-1", "--set", "n_layers=1", "--set",
            "batch_episodes=2", "--episodes", "8", "--shots", "100", "--gradient", "spsa", "--checkpoint-every", "1",
            "--run-dir", str(run_dir), "--no-tensorboard"]
    assert main([*argv, "--budget", "20000"]) == 1
    err = capsys.readouterr().err
    assert re.search(r"the first update cost \d{1,2},\d{3}\.\d\d USD; the 3 updates left at that rate: about "
                     r"\d{2},\d{3}\.\d\d USD more", err), err
    assert re.search(r"budget reached: spent \d\d,\d{3}\.\d\d USD of 20,000\.00 USD", err), err
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["spend"] == rows[0]["list_cost_total"] == rows[0]["list_cost"]
    assert main(["train", "--resume", str(run_dir), "--budget", "1e9"]) == 0
    captured = capsys.readouterr()
    assert re.search(r"update 2 cost [\d,]+\.\d\d USD; the 2 updates left at that rate", captured.err), captured.err
    # the first process paid for the second update's jobs that its stop cut short, and the resumed one again
    assert re.search(r"the run paid for [\d,]+ service jobs \([\d,]+\.\d\d USD\); its updates used [\d,]+ ", captured.err)
    table = dict(line.split(maxsplit=1) for line in captured.out.splitlines())
    assert re.fullmatch(r"\d{2,3},\d{3}\.\d\d", table["spend"]) and re.fullmatch(r"\d{2,3},\d{3}\.\d\d", table["list_cost"])
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [0, 1, 2, 3]
    assert all(r["spend"] == r["list_cost_total"] and r["circuits_total"] == sum(q["circuits"] for q in rows[:k + 1])
               for k, r in enumerate(rows))
