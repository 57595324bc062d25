"""The command line: --help everywhere, exit 2 with one line on bad usage or input."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import hqflow as hq
from hqflow.cli import main
from hqflow.ir import Circuit


def negate(x):
    return -x


def _graph():
    c = Circuit(2, name="c")
    x, w = c.inputs("x", 2), c.weights("w", 1)
    c.ry(x[0], 0).ry(x[1], 1).cx(0, 1).rz(w[0], 1)
    pipe = hq.Pipeline("cli-demo")
    pipe.input("x", "array")
    pipe.preprocess(negate, name="neg", outputs={"out": "array"})
    pipe.connect("input.x", "neg.x")
    pipe.execute("circuit", c.build(observables=["Z0 Z1"]))
    pipe.connect("neg.out", "circuit.inputs")
    pipe.input("w", "array").connect("input.w", "circuit.weights")
    return pipe


def _err(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_help_for_every_command():
    for argv in (["--help"], ["backends", "--help"], ["inspect", "--help"], ["run", "--help"], ["plan", "--help"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 0


def test_console_script_help_lists_commands():
    out = subprocess.run([sys.executable, "-m", "hqflow.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    for cmd in ("backends", "inspect", "run", "plan"):
        assert cmd in out.stdout


@pytest.mark.parametrize("argv", [[], ["bogus"], ["inspect"], ["run"], ["run", "vqe", "--steps", "-3"],
                                  ["run", "vqe", "--steps", "many"]])
def test_bad_usage_exits_2_with_one_line(argv, capsys):
    assert main(argv) == 2
    assert _err(capsys).startswith("hqflow: error:")


def test_run_unknown_workload_and_backend(capsys):
    assert main(["run", "nope"]) == 2
    assert "nope" in _err(capsys)
    assert main(["run", "qaoa", "--backend", "no-such-backend"]) == 2
    assert "unknown backend 'no-such-backend'" in _err(capsys)


def test_backends_lists_reference(capsys):
    assert main(["backends", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    ref = next(r for r in rows if r["name"] == "reference")
    assert ref["available"] and ref["max_qubits"] >= 8 and ref["exact"]


def test_a_reader_that_leaves_early_gets_no_traceback():
    """``hqflow backends | head -1``: the pipe closes before the listing ends; the command stops quietly."""
    proc = subprocess.Popen([sys.executable, "-m", "hqflow.cli", "backends"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()  # before the command prints its first line (its imports take longer)
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 1
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_inspect_missing_file(tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in _err(capsys)


def test_inspect_malformed_json(tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text('{"fragments": [,]}')
    assert main(["inspect", str(path)]) == 2
    assert "not valid JSON" in _err(capsys)


def test_inspect_graph_with_missing_fragment(tmp_path, capsys):
    doc = json.loads(_graph().build().to_json())
    doc["edges"][0]["src"] = ["ghost", "out"]
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc))
    assert main(["inspect", str(path)]) == 2
    assert "unknown fragment 'ghost'" in _err(capsys)


def test_inspect_valid_graph_prints_and_draws(tmp_path, capsys):
    path = tmp_path / "g.json"
    path.write_text(_graph().build().to_json())
    png = tmp_path / "g.png"
    assert main(["inspect", str(path), "--png", str(png)]) == 0
    out = capsys.readouterr().out
    assert "cli-demo" in out and "[execute" in out and "neg.out -> circuit.inputs" in out
    assert png.stat().st_size > 1000


@pytest.mark.parametrize("workload", ["vqe", "qaoa", "classifier"])
def test_run_workload_prints_json_figures_and_writes_out(workload, tmp_path, capsys):
    out = tmp_path / "result.json"
    assert main(["run", workload, "--steps", "2", "--seed", "1", "--json", "--out", str(out)]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures and all(isinstance(v, (int, float, str, bool)) or v is None for v in figures.values())
    saved = json.loads(out.read_text())
    assert len(saved["history"]) == 2


def test_progress_bar_shows_scalar_outputs():
    import io

    from hqflow.cli.progress import Progress

    buf = io.StringIO()
    with Progress(4, "demo", stream=buf) as bar:
        bar(2, {"loss": 0.25, "weights": np.zeros(3)})
    line = buf.getvalue().strip()
    assert "2/4" in line and "loss=0.25" in line and "weights" not in line


def _run_dir(tmp_path):
    from hqflow.common.lanes import Lane
    from hqflow.common.outcome import OK, TIMEOUT
    from hqflow.trace import Span, save_spans

    spans = [Span("prep", "prepare", Lane("cpu"), t, t, t + 0.5, lane=Lane("cpu", slot=t % 2)) for t in range(3)]
    spans += [Span("circ", "execute", Lane("qpu", "emu"), t, t + 0.5, t + 1.5, TIMEOUT if t == 1 else OK,
                   lane=Lane("qpu", "emu", 0)) for t in range(3)]
    folder = tmp_path / "run"
    save_spans(str(folder / "spans.json"), spans, {"workload": "demo"})
    return folder


@pytest.mark.parametrize("out", [False, True])
def test_trace_prints_table_and_writes_chrome_trace_and_gantt(out, tmp_path, capsys):
    folder = _run_dir(tmp_path)
    target = tmp_path / "out" if out else folder
    assert main(["trace", str(folder)] + (["--out", str(target)] if out else [])) == 0
    printed = capsys.readouterr().out
    assert "makespan" in printed and "qpu:emu#0" in printed and "5 ok, 1 timeout" in printed
    assert str(target / "trace.json") in printed and str(target / "gantt.png") in printed
    events = json.loads((target / "trace.json").read_text())["traceEvents"]
    assert len([e for e in events if e["ph"] == "X"]) == 6
    assert (target / "gantt.png").stat().st_size > 1000


def test_trace_accepts_a_spans_file(tmp_path, capsys):
    folder = _run_dir(tmp_path)
    assert main(["trace", str(folder / "spans.json")]) == 0
    assert (folder / "trace.json").exists()


@pytest.mark.parametrize("content, message", [
    (None, "no such run directory or file"),
    ("", "has no spans.json"),
    ('{"format": "hqflow.spans", "version": 1, "spans": [,]}', "not valid JSON"),
    ('{"format": "hqflow.spans", "version": 1, "spans": [{"fragment": "a"}]}', "missing field"),
])
def test_trace_bad_run_dir_exits_2(content, message, tmp_path, capsys):
    folder = tmp_path / "run"
    if content is not None:
        folder.mkdir()
        if content:
            (folder / "spans.json").write_text(content)
    assert main(["trace", str(folder)]) == 2
    assert message in _err(capsys)
    assert not (folder / "trace.json").exists()


def test_trace_help():
    with pytest.raises(SystemExit) as exc:
        main(["trace", "--help"])
    assert exc.value.code == 0


def test_run_writes_run_dir(tmp_path, capsys):
    folder = tmp_path / "runs" / "qaoa-1"
    # on reference: what a run directory holds is the backend's no concern (test_run_workload_prints_json_figures_and_
    # writes_out runs qaoa on the default backend, compiled, whose first program of the 8-qubit circuit takes seconds)
    assert main(["run", "qaoa", "--steps", "2", "--seed", "1", "--json", "--run-dir", str(folder), "--backend",
                 "reference"]) == 0
    config = json.loads((folder / "config.json").read_text())
    result = json.loads((folder / "result.json").read_text())
    assert config["steps"] == 2 and config["seed"] == 1
    assert len(result["history"]) == 2 and "spans" not in result
    if (folder / "spans.json").exists():  # once the workload reports its spans
        assert main(["trace", str(folder)]) == 0


def test_run_dir_that_is_a_file_exits_2(tmp_path, capsys):
    path = tmp_path / "file"
    path.write_text("")
    assert main(["run", "qaoa", "--steps", "1", "--run-dir", str(path)]) == 2
    assert f"--run-dir: {path}: is a file; give a folder" in _err(capsys)  # (checked at once: issue 34, item 17)


def test_run_dir_saves_spans_the_workload_reports(tmp_path, capsys, monkeypatch):
    from hqflow.common.lanes import Lane
    from hqflow.trace import Span, load_spans
    from hqflow.workloads import get_workload

    module = get_workload("qaoa")
    spans = [Span("circ", "execute", Lane("qpu", "reference"), 0, 0.0, 0.5),
             Span("adam", "learn", Lane("cpu"), 0, 0.5, 0.6)]
    real_run = module.run
    monkeypatch.setattr(module, "run", lambda cfg, progress=None: {**real_run(cfg, progress),
                                                                   "spans": [s.to_dict() for s in spans]})
    folder = tmp_path / "run"
    assert main(["run", "qaoa", "--steps", "1", "--json", "--run-dir", str(folder), "--backend", "reference"]) == 0
    assert "spans" not in json.loads((folder / "result.json").read_text())
    assert load_spans(str(folder / "spans.json")) == (spans, {"workload": "qaoa", "config": json.loads(
        (folder / "config.json").read_text())})
    assert main(["trace", str(folder)]) == 0


# ----------------------------------------------------------------------- hardening (issue 14)


@pytest.mark.parametrize("command", ["inspect", "trace"])
@pytest.mark.parametrize("name, data", [("checkpoint.pt", b"\x80\x02}q\x00(X\x05\x00"),
                                        ("learning_curve.png", b"\x89PNG\r\n\x1a\n\xff\xfe")])
def test_binary_files_are_named_one_line_errors(command, name, data, tmp_path, capsys):
    path = tmp_path / name
    path.write_bytes(data)
    assert main([command, str(path)]) == 2
    assert f"{name}: not a" in _err(capsys)


def test_inspect_of_a_main_module_graph_says_that_no_resolve_exists(tmp_path, capsys):
    doc = json.loads(_graph().build().to_json())
    doc["fragments"][0]["fn"] = "__main__:step"
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc))
    assert main(["inspect", str(path)]) == 2
    assert "cannot import function '__main__:step'" in (err := _err(capsys)) and "--no-resolve" in err
    assert main(["inspect", str(path), "--no-resolve"]) == 0


@pytest.mark.parametrize("png, message", [("g.txt", "must end in .png"), ("missing/g.png", "no such folder"),
                                          ("d.png", "is a directory")])
def test_inspect_png_paths_are_checked_before_the_work(png, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d.png").mkdir()
    (tmp_path / "g.json").write_text(_graph().build().to_json())
    assert main(["inspect", "g.json", "--png", png]) == 2
    assert message in _err(capsys)


def test_trace_with_an_infinite_start_is_a_one_line_error(tmp_path, capsys):
    span = {"fragment": "a", "kind": "learn", "step": 0, "resource": "cpu", "lane": "cpu", "start": float("inf"),
            "end": 1.0}
    (tmp_path / "spans.json").write_text(json.dumps({"format": "hqflow.spans", "version": 2, "spans": [span]}))
    assert main(["trace", str(tmp_path)]) == 2
    assert "start and end must be finite numbers" in _err(capsys)


def test_trace_reads_a_spans_file_whose_outcomes_are_text(tmp_path, capsys):  # issue 34, item 23
    """spans.json before version 6 wrote an outcome as text ("ok", "error: MESSAGE"): it still loads, and the
    trace's events carry the same text."""
    spans = [{"fragment": "learn", "kind": "learn", "resource": "cpu", "step": 0, "start": 0.0, "end": 1.0,
              "outcome": "ok", "lane": "cpu/0"},
             {"fragment": "circ", "kind": "execute", "resource": "qpu:q", "step": 0, "start": 0.5, "end": 2.0,
              "outcome": "error: injected failure", "lane": "qpu:q#1/0"}]
    (tmp_path / "spans.json").write_text(json.dumps({"format": "hqflow.spans", "version": 5, "spans": spans}))
    assert main(["trace", str(tmp_path)]) == 0
    events = json.loads((tmp_path / "trace.json").read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    assert {e["args"]["outcome"] for e in events if e.get("ph") == "X"} == {"ok", "error: injected failure"}


def test_control_characters_in_usage_errors_are_escaped(tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "evil\x1b[2K\u202e.json")]) == 2
    err = _err(capsys)
    assert "\x1b" not in err and "\u202e" not in err and "\\x1b" in err


@pytest.mark.parametrize("out, message", [("d", "is a directory"), ("missing/r.json", "no such folder"),
                                          ("x" * 300 + "/r.json", "no such folder")])
def test_run_out_is_checked_before_the_work(out, message, tmp_path, capsys, monkeypatch):
    import hqflow.workloads.qaoa as qaoa

    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    monkeypatch.setattr(qaoa, "run", lambda *a, **k: pytest.fail("the workload ran before --out was checked"))
    assert main(["run", "qaoa", "--out", out]) == 2
    assert message in _err(capsys)
    assert not list(tmp_path.glob("*.tmp-*"))


@pytest.mark.parametrize("argv", [["train", "--resume", "/" + "a" * 300 + "/run"], ["eval", "/" + "a" * 300 + "/run"],
                                  ["train", "cartpole", "--run-dir", "/" + "a" * 300 + "/run"]])
def test_a_path_too_long_is_a_one_line_error(argv, capsys):
    assert main(argv) == 2
    err = _err(capsys)
    assert "File name too long" in err or "no such" in err


@pytest.mark.parametrize("command", ["run", "train"])
def test_a_backend_suffix_that_the_backend_does_not_take_is_refused(command, capsys):
    argv = ["run", "qaoa"] if command == "run" else ["train", "cartpole", "--episodes", "1"]
    assert main([*argv, "--backend", "reference:x"]) == 2  # was passed on as max_qubits: a TypeError later
    assert "backend 'reference' takes no ':' suffix" in _err(capsys)


def test_ctrl_c_during_a_command_says_interrupted_not_an_empty_message(monkeypatch, capsys):
    import hqflow.cli.run as cli_run

    def interrupted(args):
        raise KeyboardInterrupt  # what Ctrl-C raises: no message of its own

    monkeypatch.setattr(cli_run, "cmd_run", interrupted)
    assert main(["run", "vqe"]) == 130
    assert _err(capsys) == "hqflow: interrupted"


def test_ray_that_times_out_starting_is_one_line_that_says_what_to_try(tmp_path, capsys, monkeypatch):  # 34.26
    """Ray's own start failing under load raises a bare Exception; it is a failure of the run (exit 1), not of
    its usage, told in one line that names Ray and what to try."""
    import ray

    def timed_out(*args, **kwargs):
        raise Exception("The current node timed out during startup. This could happen because some of the Ray "
                        "processes failed to startup.\nmore of Ray's text")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", timed_out)
    assert main(["train", "cartpole", "--distribution", "ray-actors", "--episodes", "2",
                 "--run-dir", str(tmp_path / "run")]) == 1
    err = _err(capsys)
    assert err.startswith("hqflow: cannot start or reach a local Ray: The current node timed out during startup")
    assert "try again, or run without Ray" in err


# ----------------------------------------------------------------------- new users and faults (issue 34)


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc, where no one (root included) "
                    "can make a file")
@pytest.mark.parametrize("argv, what", [
    (["inspect", "g.json", "--png", "/proc/nope.png"], "--png: /proc/nope.png: cannot write"),
    (["run", "qaoa", "--out", "/proc/x.json"], "--out: /proc/x.json: cannot write"),
    (["run", "qaoa", "--run-dir", "/proc/run"], "--run-dir: /proc/run: cannot write there"),
    (["run", "qaoa", "--plan", "auto", "--profile", "/proc/p.json"], "--profile: /proc/p.json: cannot write"),
    (["plan", "qaoa", "--profile", "/proc/p.json"], "--profile: /proc/p.json: cannot write"),
    (["train", "cartpole", "--run-dir", "/proc/run"], "--run-dir: /proc/run: cannot write there"),
    (["train", "cartpole", "--run-dir", ""], "--run-dir: : no name"),
    (["run", "qaoa", "--out", ""], "--out: : no name"),
    (["train", "cartpole", "--run-dir", "x" * 300], "File name too long"),
    (["train", "cartpole", "--plan", "auto", "--profile", "/proc/p.json"], "--profile: /proc/p.json: cannot write"),
    (["trace", "spans.json", "--out", "/proc"], "--out: /proc: cannot write there"),
    (["eval", "run", "--record", "/proc/videos"], "--record: /proc/videos: cannot write there"),
])
def test_an_output_path_that_cannot_be_written_is_one_line_before_the_work(argv, what, tmp_path, capsys,
                                                                          monkeypatch):
    """os.access says yes to root even in /proc: the folder is tried with a file of the output's name."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "g.json").write_text(_graph().build().to_json())
    (tmp_path / "spans.json").write_text(json.dumps({"format": "hqflow.spans", "version": 2, "spans": [
        {"fragment": "f", "kind": "learn", "resource": "cpu", "lane": "cpu", "step": 0, "start": 0.0, "end": 1.0}]}))
    _no_work(monkeypatch)
    assert main(argv) == 2
    assert what in _err(capsys)


def _no_work(monkeypatch) -> None:
    """Every workload's run, training and evaluation fail the test: the command was to refuse before them."""
    from hqflow.workloads import WORKLOADS, get_workload
    from hqflow.workloads.rl import runner, trained

    for module, name in [(get_workload(w), "run") for w in WORKLOADS] + [(runner, "train"), (trained, "evaluate")]:
        monkeypatch.setattr(module, name, lambda *a, **k: pytest.fail("the work ran before its input was checked"))


@pytest.mark.parametrize("argv, message", [
    (["train", "cartpole", "--algo", "reinfroce"], "unknown algorithm 'reinfroce' (did you mean reinforce?); known: "),
    (["train", "cartpole", "--distribution", "pipelind"], "unknown distribution policy 'pipelind' (did you mean "
                                                          "pipelined?)"),
    (["train", "cartpole", "--gradient", "psda"], "invalid choice: 'psda' (did you mean spsa?)"),
    (["run", "vqe", "--gradient", "param_shift"], "invalid choice: 'param_shift' (did you mean param-shift?)"),
    (["run", "vqee"], "unknown workload 'vqee' (did you mean vqe?); known: classifier, qaoa, vqe"),
    (["plan", "qoaa"], "unknown workload 'qoaa' (did you mean qaoa?); known: classifier, qaoa, vqe, or a run "),
    (["plan", "vqe", "--objective", "cots"], "invalid choice: 'cots' (did you mean cost?)"),
    (["train", "cartpole", "--algo", "sarsa"], "unknown algorithm 'sarsa'; known: reinforce, dqn, ppo"),
])
def test_a_misspelt_choice_gets_a_did_you_mean(argv, message, capsys):
    assert main(argv) == 2
    assert message in _err(capsys)


def test_choices_are_taken_in_any_case():
    from hqflow.cli import _parser

    args = _parser().parse_args(["train", "cartpole", "--algo", "PPO", "--distribution", "Multi-Learner", "--gradient",
                                 "SPSA", "--plan", "AUTO", "--objective", "Cost"])
    assert (args.algo, args.distribution, args.gradient, args.plan, args.objective) == (
        "ppo", "multi-learner", "spsa", "auto", "cost")
    assert _parser().parse_args(["run", "VQE", "--gradient", "Param-Shift"]).workload == "vqe"
    assert _parser().parse_args(["plan", "Qaoa", "--objective", "TIME"]).workload == "qaoa"


@pytest.mark.parametrize("argv, message", [
    (["run", "classifier", "--steps", "1000000000000"], "--steps: expected a positive integer (at most 1,000,000)"),
    (["plan", "vqe", "--steps", "1000001"], "--steps: expected a positive integer (at most 1,000,000)"),
    (["train", "cartpole", "--episodes", "100000000"], "--episodes: expected a positive integer (at most 10,000,000)"),
    (["eval", "run", "--episodes", str(2**70)], "--episodes: expected a positive integer (at most 10,000,000), got "
                                                "(an integer of 22 digits)"),
    (["run", "vqe", "--pool", "9" * 5000], "--pool: expected a positive integer (at most 64), got '999"),
    (["train", "cartpole", "--distribution", "multi-learner", "--learners", "65"], "--learners: expected a positive "
                                                                                  "integer (at most 64), got 65"),
    (["plan", "vqe", "--max-staleness", str(2**70)], "--max-staleness: expected an integer >= 0 (at most 32)"),
    (["train", "cartpole", "--budget", "nan"], "--budget: expected an amount >= 0, got 'nan'"),
])
def test_counts_past_what_a_run_can_hold_are_refused_before_it_starts(argv, message, capsys, monkeypatch):
    """Was: a run of 10**12 steps accepted (about 700 years), a MemoryError for a huge pool, a planner searching
    2**70 stalenesses."""
    _no_work(monkeypatch)
    assert main(argv) == 2
    assert message in _err(capsys)


@pytest.mark.parametrize("argv", [["run", "classifier"], ["run", "vqe"], ["plan", "qaoa"], ["train", "cartpole"],
                                  ["eval", "run"]])
def test_a_negative_seed_is_a_usage_error_in_every_subcommand(argv, capsys, monkeypatch):
    """Was: exit 1 and a fragment's error (vqe), a ValueError traceback (classifier's make_data)."""
    _no_work(monkeypatch)
    assert main([*argv, "--seed", "-1"]) == 2
    assert "--seed: expected an integer >= 0, got -1" in _err(capsys)


@pytest.mark.parametrize("workload", ["classifier", "vqe", "qaoa"])
def test_a_workloads_config_refuses_a_negative_seed_and_steps_past_the_cap(workload):
    from hqflow.workloads import get_workload

    config = get_workload(workload).Config
    with pytest.raises(ValueError, match="seed must be"):
        config(seed=-1)
    with pytest.raises(ValueError, match="steps must be"):
        config(steps=10**12)


def test_paths_that_are_not_utf8_are_printed_escaped(tmp_path, monkeypatch):
    """A folder named with bytes that are not UTF-8 (Linux hands them to Python as lone surrogates): trace and
    the figures table print it escaped, as a UTF-8 terminal can show (was: UnicodeEncodeError after the work)."""
    import contextlib
    import io

    from hqflow.cli.pool import show_figures

    folder = tmp_path / "caf\udce9"
    folder.mkdir()
    (folder / "spans.json").write_text(json.dumps({"format": "hqflow.spans", "version": 2, "spans": [
        {"fragment": "f", "kind": "learn", "resource": "cpu", "lane": "cpu", "step": 0, "start": 0.0, "end": 1.0}]}))
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")  # strict, as a terminal's
    with contextlib.redirect_stdout(out):
        assert main(["trace", str(folder)]) == 0
        show_figures(type("Args", (), {"json": False})(), {"run_dir": str(folder)}, 10)
    out.flush()
    assert out.buffer.getvalue().decode().count("caf\\udce9") == 3


def test_flags_that_the_run_refuses_are_refused_before_a_plan_is_made_and_printed(monkeypatch, capsys):
    import hqflow.workloads.rl.planned as planned

    monkeypatch.setattr(planned, "plan_training", lambda *a, **k: pytest.fail("planned before refusing"))
    assert main(["train", "cartpole", "--plan", "auto", "--shot-budget", "1000"]) == 2
    assert "--shot-budget counts the shots of a job backend's jobs" in _err(capsys)
    assert main(["train", "cartpole", "--backend", "emulated-qpu", "--plan", "auto", "--ray-address", "auto"]) == 2
    assert "--ray-address needs --distribution ray-actors or multi-learner" in _err(capsys)


def test_plan_checks_its_backend_before_calibrating(monkeypatch, capsys):
    _no_work(monkeypatch)
    assert main(["plan", "vqe", "--backend", "nope"]) == 2
    assert "--backend: unknown backend 'nope'" in _err(capsys)


@pytest.mark.parametrize("item, message", [("9" * 5000 + ":per_job=0.1", "but the pool has 1 (--pool)"),
                                           ("per job=1", "expected KEY=VALUE"), ("=1", "expected KEY=VALUE")])
def test_a_backend_option_of_a_member_past_the_pool_or_without_a_key_is_one_line(item, message, capsys,
                                                                                monkeypatch):
    _no_work(monkeypatch)
    assert main(["run", "vqe", "--backend", "emulated-qpu", "--backend-opt", item]) == 2
    assert message in _err(capsys)


def test_a_resources_file_name_no_file_can_have_is_one_line(capsys):
    assert main(["train", "cartpole", "--resources", "\ud800"]) == 2  # a lone surrogate (Python code, not argv)
    assert "--resources: 'utf-8' codec can't encode" in _err(capsys)
