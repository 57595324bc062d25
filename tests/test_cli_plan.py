"""``hqflow plan`` and ``hqflow run --plan auto``: a plan from a calibration run, a saved profile or a
run directory; its prediction against the measured run; every run folds into the profile."""
import dataclasses
import json

import pytest

from hqflow.cli import main
from hqflow.planning.profile import Profile

POOL = ["--backend", "emulated-qpu", "--pool", "2", "--backend-opt", "per_job=0.002",
        "--backend-opt", "per_circuit=0.00002"]


def _json(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_plan_prints_its_table_and_its_prediction_holds_against_the_measured_run(capsys):
    assert main(["plan", "vqe", "--steps", "12", "--calibrate", "4", "--measure", *POOL]) == 0
    out = capsys.readouterr().out
    for words in ("plan for vqe, 12 steps", "staleness", "rows per job", "pool emulated-qpu",
                  "predicted makespan", "measured makespan"):
        assert words in out
    assert "qpu:emulated-qpu#0" in out or "qpu:emulated-qpu#1" in out  # the members it chose (which: its figures)
    assert main(["plan", "vqe", "--steps", "12", "--calibrate", "4", "--measure", "--json", *POOL]) == 0
    figures = _json(capsys)
    assert figures["steps"] == 12 and set(figures["members"]) == {"emulated-qpu"}
    # how close the prediction comes is a timing figure (benchmarks/planner.py); here only that it is reported
    # and is the relative error of the two makespans it prints, whatever the machine's load
    assert figures["measured_s"] > 0 and figures["predicted_s"] > 0
    assert figures["prediction_error"] == pytest.approx(
        abs(figures["predicted_s"] - figures["measured_s"]) / figures["measured_s"], abs=0.02)


def test_a_saved_profile_is_reused_and_every_run_folds_into_it(tmp_path, capsys):
    prof = tmp_path / "prof.json"
    assert main(["plan", "vqe", "--steps", "8", "--calibrate", "3", "--profile", str(prof), "--json", *POOL]) == 0
    first = Profile.load(str(prof))
    jobs = sum(b.jobs for b in first.backends)
    assert dict(first.rows)["energy"] >= 2  # circuits per step: a plan from the saved profile alone needs them
    assert jobs >= 3 and _json(capsys)["predicted_s"] > 0
    # no calibration run now: the saved profile plans the run, and the run itself is folded in
    assert main(["run", "vqe", "--steps", "6", "--plan", "auto", "--profile", str(prof), "--json", *POOL]) == 0
    assert "predicted makespan" in capsys.readouterr().err
    assert sum(b.jobs for b in Profile.load(str(prof)).backends) > jobs


@pytest.mark.parametrize("bound", [0, 2])
def test_run_plan_auto_takes_max_staleness_as_the_readme_says(bound, tmp_path, capsys):
    argv = ["run", "vqe", "--steps", "4", "--plan", "auto", "--max-staleness", str(bound), "--json", *POOL]
    assert main(argv) == 0
    staleness = [line.split()[1] for line in capsys.readouterr().err.splitlines() if line.startswith("staleness")]
    assert staleness and int(staleness[0]) <= bound


def test_plan_from_a_run_directory(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["run", "vqe", "--steps", "6", "--backend", "emulated-qpu", "--run-dir", str(run_dir), "--json"]) == 0
    capsys.readouterr()
    assert main(["plan", str(run_dir), "--json"]) == 0
    figures = _json(capsys)
    assert figures["workload"] == "vqe" and figures["steps"] == 6 and figures["members"] == {
        "emulated-qpu": ["qpu:emulated-qpu"]}
    # its spans measured emulated-qpu: another backend is one line and exit 2 (was a ValueError traceback)
    assert main(["plan", str(run_dir), "--backend", "compiled", "--calibrate", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "ran on 'emulated-qpu': its spans cannot plan 'compiled'" in err, err


def test_a_profile_path_under_a_file_is_one_line_before_any_calibration(tmp_path, capsys):
    (tmp_path / "a_file").write_text("")
    profile = str(tmp_path / "a_file" / "sub")  # was a FileExistsError traceback after the calibration
    for argv in (["plan", "vqe", "--calibrate", "2", *POOL], ["run", "vqe", "--plan", "auto", *POOL],
                 [*TRAIN, "--run-dir", str(tmp_path / "r"), "--plan", "auto"]):
        assert main([*argv, "--profile", profile]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "--profile" in err and "no such folder" in err and "a_file" in err, err
        assert "calibrating" not in err


@pytest.mark.parametrize("argv, words", [
    (["plan", "nosuch"], "unknown workload 'nosuch'"),
    (["plan", "vqe", "--objective", "speed"], "invalid choice"),
    (["plan", "vqe", "--budget", "-1"], "expected an amount >= 0"),
    (["plan", "vqe", "--pool", "2", "--backend-opt", "3:per_job=1"], "member 3 but the pool has 2"),
    (["run", "vqe", "--profile", "p.json"], "--profile goes with --plan auto"),
    (["run", "vqe", "--max-staleness", "1"], "--max-staleness goes with --plan auto"),
    (["run", "vqe", "--plan", "auto", "--max-staleness", "-1"], "expected an integer >= 0"),
    (["run", "vqe", "--objective", "cost"], "--objective goes with --plan auto"),
    (["run", "vqe", "--plan", "auto", "--objective", "speed"], "invalid choice"),
])
def test_bad_usage_is_one_line_and_exit_2(argv, words, capsys, tmp_path):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err, err


def test_a_run_directory_that_is_not_one_is_a_usage_error(tmp_path, capsys):
    assert main(["plan", str(tmp_path)]) == 2
    assert "not a run directory of hqflow run --run-dir" in capsys.readouterr().err


TRAIN = ["train", "cartpole", "--episodes", "20", "--backend", "emulated-qpu", "--pool", "2", "--backend-opt",
         "per_job=0.001", "--backend-opt", "per_circuit=0.00001", "--no-tensorboard", "--json"]


def test_train_plan_auto_calibrates_plans_trains_and_folds_the_run_into_the_profile(tmp_path, capsys):
    prof = tmp_path / "qpu.json"
    argv = [*TRAIN, "--plan", "auto", "--profile", str(prof), "--max-staleness", "1"]
    assert main([*argv, "--run-dir", str(tmp_path / "a")]) == 0
    captured = capsys.readouterr()
    assert "calibrating" in captured.err and "predicted makespan" in captured.err and "pool emulated-qpu" in captured.err
    figures = json.loads(captured.out.strip().splitlines()[-1])
    assert figures["episodes"] == 20 and figures["distribution"] in ("pipelined", "sync")
    saved = Profile.load(str(prof))
    assert {f.fragment for f in saved.fragments} == {"rollout", "learn"} and saved.fragment("rollout").jobs > 0
    jobs = sum(b.jobs for b in saved.backends)
    assert {str(b.backend) for b in saved.backends} == {"qpu:emulated-qpu#0", "qpu:emulated-qpu#1"}
    slow = [dataclasses.replace(b, per_job=5.0) if b.backend.member == 0 else b for b in saved.backends]
    dataclasses.replace(saved, backends=tuple(slow)).save(str(prof))  # so the plan keeps #1 alone
    assert main([*argv, "--run-dir", str(tmp_path / "b")]) == 0  # from the saved profile: no calibration now
    err = capsys.readouterr().err
    assert "calibrating" not in err
    assert next(x for x in err.splitlines() if x.startswith("pool emulated-qpu")).split()[2:] == ["qpu:emulated-qpu#1"]
    folded = Profile.load(str(prof))
    assert sum(b.jobs for b in folded.backends) > jobs
    # the run of #1 alone is filed under #1, not under a member of a pool of one (which the next plan named
    # beside #1, and could not apply to the pool given)
    assert {str(b.backend) for b in folded.backends} == {"qpu:emulated-qpu#0", "qpu:emulated-qpu#1"}
    assert main([*argv, "--run-dir", str(tmp_path / "c")]) == 0


@pytest.mark.parametrize("extra, words", [
    (["--plan", "auto", "--distribution", "sync"], "--plan auto chooses the distribution"),
    (["--max-staleness", "1"], "--max-staleness and --profile go with --plan auto"),
    (["--plan", "sometimes"], "invalid choice"),
])
def test_train_plan_usage_errors(extra, words, capsys, tmp_path):
    assert main([*TRAIN, "--run-dir", str(tmp_path / "r"), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err, err


FRUGAL = ["train", "cartpole", "--backend", "emulated-qpu", "--backend-opt", "per_job=0", "--plan", "auto",
          "--objective", "cost", "--gradients", "param-shift,spsa", "--shots-range", "100:5000", "--episodes", "4",
          "--set", "n_layers=1", "--set", "batch_episodes=2", "--no-tensorboard", "--json"]


def test_train_objective_cost_chooses_within_the_bounds_prints_why_and_predicts_the_usage(tmp_path, capsys):
    assert main([*FRUGAL, "--run-dir", str(tmp_path / "r")]) == 0
    captured = capsys.readouterr()
    err = captured.err
    for words in ("--objective cost chose", "gradient      spsa: 4 circuits per state", "against param-shift's 57",
                  "shots         5000: emulated-qpu does not price its jobs", "packing", "per episode of 500 steps",
                  "rows per job                  all", "predicted usage"):
        assert words in err, words
    saved = json.loads((tmp_path / "r" / "config.json").read_text())["config"]
    assert (saved["gradient"], saved["shots"], saved["spsa_samples"], saved["groups"]) == ("spsa", 5000, 2, 1)
    figures = json.loads(captured.out.strip().splitlines()[-1])
    line = next(x for x in err.splitlines() if x.startswith("predicted usage")).split()
    jobs, circuits, shots = (int(line[k].replace(",", "")) for k in (2, 5, 7))
    assert shots == 5000 * circuits and figures["shots"] == 5000 * figures["circuits"]
    # the rollouts' and learner's own jobs are modelled by their mean rounds and rows per call: close, not exact
    assert figures["service_jobs"] == pytest.approx(jobs, rel=0.25)
    assert figures["circuits"] == pytest.approx(circuits, rel=0.25)


def test_plan_json_gives_the_predicted_usage(capsys):
    assert main(["plan", "vqe", "--steps", "4", "--calibrate", "3", "--json", *POOL]) == 0
    figures = _json(capsys)
    assert figures["predicted_service_jobs"] >= 4 and figures["predicted_circuits"] >= figures["predicted_service_jobs"]
    assert figures["predicted_shots"] == 0  # exact values


@pytest.mark.parametrize("extra, words", [
    (["--plan", "auto", "--objective", "cost", "--shots-range", "0:10"], "expected LO:HI with 1 <= LO <= HI"),
    (["--plan", "auto", "--objective", "cost", "--spsa-samples-range", "4"], "expected LO:HI with 1 <= LO <= HI"),
    (["--plan", "auto", "--objective", "cost", "--gradients", "foo"], "expected param-shift and/or spsa"),
    (["--plan", "auto", "--shots-range", "100:200"], "--shots-range goes with --plan auto --objective cost"),
    (["--gradients", "spsa"], "--gradients goes with --plan auto --objective cost"),
    (["--objective", "cost"], "--objective goes with --plan auto"),
    (["--plan", "auto", "--objective", "cost", "--shots", "10", "--shots-range", "10:20"],
     "give --shots or --shots-range, not both"),
])
def test_train_objective_usage_errors(extra, words, capsys, tmp_path):
    assert main([*TRAIN, "--run-dir", str(tmp_path / "r"), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err, err
    assert not (tmp_path / "r").exists()


PRICED = ["train", "cartpole", "--backend", "emulated-qpu", "--backend-opt", "per_job=0.001", "--backend-opt",
          "price_as=ionq.qpu.aria-1", "--shots", "100", "--gradient", "spsa", "--episodes", "4", "--set", "n_layers=1",
          "--set", "batch_episodes=2", "--no-tensorboard", "--json", "--plan", "auto"]


def _amounts(line: str, *before: str) -> list[float]:
    """The amounts printed after each of ``before`` in ``line`` (``1,234.50``)."""
    return [float(line.split(word, 1)[1].split()[0].rstrip(",;").replace(",", "")) for word in before]


def test_train_plan_auto_calibration_counts_against_the_budget_and_a_plan_past_it_is_refused(tmp_path, capsys):
    prof = tmp_path / "prof.json"
    argv = [*PRICED, "--objective", "cost", "--profile", str(prof)]
    assert main([*argv, "--budget", "1e9", "--run-dir", str(tmp_path / "a")]) == 0
    err = capsys.readouterr()
    figures, err = json.loads(err.out.strip().splitlines()[-1]), err.err
    line = next(x for x in err.splitlines() if x.startswith("hqflow: the calibration spent"))
    spent, left, budget = _amounts(line, "spent", "spend the", "--budget")
    assert spent > 0 and budget == 1e9 and left == pytest.approx(budget - spent, abs=0.01)
    # the plan is made for what is left, under the objective asked for (the table said "time" under cost)
    table = next(x for x in err.splitlines() if x.startswith("objective"))
    assert table.split()[1] == "cost" and _amounts(table, "budget of") == [pytest.approx(left, abs=0.01)]
    assert 0 < figures["spend"] <= budget
    # the run's ledger starts with what the calibration paid, so a resume's --budget counts it too
    first = json.loads((tmp_path / "a" / "ledger.jsonl").read_text().splitlines()[0])
    assert first["spend"] == pytest.approx(spent, abs=0.01)
    assert figures["spend"] == pytest.approx(spent + figures["list_cost"], abs=0.01)
    # a plan whose predicted spend passes the budget is refused, with both figures
    assert main([*argv, "--budget", "100", "--run-dir", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after the report of --objective cost's choice
    assert err.startswith("hqflow: error: cannot plan the training: no configuration fits a budget of 100.00")
    assert _amounts(err, "predicted to spend")[0] > 100 and not (tmp_path / "b").exists()


def test_train_plan_auto_calibration_never_spends_past_its_share_of_the_budget(tmp_path, capsys):
    # 20,000 USD for a run whose calibration alone costs more: it stops at its share, before the job that
    # would pass it, and says so (it ran uncapped and unreported)
    assert main([*PRICED, "--budget", "20000", "--run-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "calibrating" in err[0] and len(err) == 2, err
    assert "--budget 20,000.00 USD does not fit the run: the calibration reached its share" in err[1]
    share, paid = _amounts(err[1], "share,", "after spending")
    assert share < 20000 and 0 <= paid <= share and not (tmp_path / "r").exists()


def test_run_plan_auto_takes_objective_cost_and_the_table_names_it(capsys):
    assert main(["run", "vqe", "--steps", "4", "--plan", "auto", "--objective", "cost", "--json", *POOL]) == 0
    table = next(x for x in capsys.readouterr().err.splitlines() if x.startswith("objective"))
    assert table.split()[1:] == ["cost"]


@pytest.mark.parametrize("argv", [
    ["run", "vqe", "--steps", "4", "--plan", "auto", "--json"],
    ["plan", "vqe", "--steps", "4", "--calibrate", "3", "--measure", "--json"],
    [*TRAIN, "--plan", "auto", "--episodes", "4", "--set", "batch_episodes=2"],
    [*TRAIN, "--plan", "auto", "--episodes", "4", "--set", "batch_episodes=2", "--objective", "cost"],
])
def test_plan_auto_makes_each_member_of_the_pool_once(argv, tmp_path, capsys, monkeypatch):
    from hqflow.backends.emulated import EmulatedQPU

    made, init = [], EmulatedQPU.__init__  # a member has the pool's options (a bare one checks a name)
    monkeypatch.setattr(EmulatedQPU, "__init__", lambda self, *a, **k: (made.extend([k] if k else []),
                                                                         init(self, *a, **k))[1])
    assert main([*argv, *POOL, *(["--run-dir", str(tmp_path / "r")] if argv[0] != "plan" else [])]) == 0
    assert len(made) == 2  # the calibration runs, the plan and the run share them (were made two to four times)
