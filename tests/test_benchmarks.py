"""Benchmarks stay runnable: each accepts --quick and ends with one JSON line of figures."""
import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
# Smaller than --quick alone, to keep CI short: the smallest sizes each script takes; each still runs every code path
# but Ray's (scale_out.py's are Ray's).
SMOKE = {"backends.py": ["--batch", "20", "--sizes", "20,40"],
         "overlap.py": ["--steps", "2", "--q-ms", "5", "--no-ray"],
         "simulators.py": ["--batch", "50", "--no-peers"],
         "rl_cartpole.py": ["--seeds", "1", "--episodes", "10", "--overlap-episodes", "10"],
         "rl_dqn.py": ["--budget", "20"],
         "azure_loopback.py": ["--fault-rows", "50", "--rl-episodes", "1", "--learn-rows", "8", "--rate-rows", "8",
                               "--rl-env", "azure_tiny_env:Blink-v0"],  # 3 steps an episode, 1 qubit
         "planner.py": ["--steps", "4", "--calibrate", "3", "--elastic-steps", "20", "--steps-classifier", "4"],
         "rl_envs.py": ["--seeds", "1", "--envs", "cartpole,frozenlake", "--episodes", "10"],
         "rl_qpu.py": ["--episodes", "10", "--fault-episodes", "10", "--jobs", "11", "--compiled-episodes", "10"],
         "scale_out.py": ["--steps", "2", "--q-ms", "5", "--actor-episodes", "10", "--compression-seeds", "0", "--learner-updates",
                          "4"]}
# Run as a user runs them, in an interpreter of their own: fuzz.py stubs hqflow's training, planning and
# evaluation for its whole process, and scale_out.py stops this process's Ray to start a cluster of its own. The
# others run here, through their main(argv) (the seconds of a fresh interpreter's imports, saved).
FRESH = ("fuzz.py", "scale_out.py")
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py") if not p.name.startswith("_"))
OWN_TEST = ("cloud_rl.py",)  # smoke-run by a test of its own below, which goes on to check more of it


@pytest.mark.parametrize("script", [s for s in SCRIPTS if s not in OWN_TEST])
def test_benchmark_quick_ends_with_json(script, tmp_path, benchmark, request, monkeypatch):
    argv = ["--quick", *SMOKE.get(script, [])]
    if script == "azure_loopback.py":  # on this worker's Azurite and loopback service, not a second of each
        tiny = str(Path(__file__).parent / "backends" / "azure")  # its `hqflow train` process imports azure_tiny_env
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (tiny, os.environ.get("PYTHONPATH")) if p))
        figures, err = benchmark(script, *argv, service=request.getfixturevalue("azure_service")), ""
    elif script in FRESH:
        proc = subprocess.run([sys.executable, str(BENCH / script), *argv], capture_output=True, text=True,
                              cwd=tmp_path, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        figures, err = json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr
    else:
        figures, err = benchmark(script, *argv), ""
    _check(script, figures, err)


def _check(script: str, figures, err: str) -> None:
    """What every benchmark's smoke run must show: its JSON figures, no failed sub-run, exact values exact."""
    assert isinstance(figures, dict) and figures
    # the runs a benchmark starts in processes of its own succeeded (a failed one is only a figure, its message or
    # their count, not the benchmark's exit status)
    failed = [k for k, v in figures.items() if (k.endswith("_error") and isinstance(v, (str, list)))
              or (k.endswith("_errors") and v)]
    assert not failed, {k: figures[k] for k in failed}
    if script == "fuzz.py":  # every fuzzed input accepted or refused with a one-line error of hqflow's own
        assert figures["crashes"] == 0 and figures["accepted"] > 0 and figures["rejected"] > 0, err[-2000:]
    diffs = [v for k, v in figures.items() if k.endswith("max_abs_diff_vs_reference")]
    assert all(d < 1e-6 for d in diffs)


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_benchmark_run_as_a_script_calls_its_main(script):
    """What the in-process runs above leave out of a user's ``python benchmarks/SCRIPT``: the script ends by
    calling ``main()`` when run as one (and exits with its status)."""
    tree = ast.parse((BENCH / script).read_text())
    last = tree.body[-1]
    assert ast.unparse(last.test) == "__name__ == '__main__'", ast.unparse(last)
    assert ast.unparse(last.body[-1]) in ("sys.exit(main())", "raise SystemExit(main())", "main()"), ast.unparse(last)
    assert any(isinstance(f, ast.FunctionDef) and f.name == "main" and [a.arg for a in f.args.args][:1] == ["argv"]
               for f in tree.body), "main(argv=None): the tests call it with their argv"


def test_cloud_rl_twin_as_mux_is_twin_repriced(tmp_path, benchmark):
    """cloud_rl.py's smoke run (baseline, twin and twin_mux, the twin's cosine and sim_to_qpu), then
    ``--twin-as-mux``: it checks the kept twin run against twin_mux's, repriced, and derives twin's figures where it
    has no run: the derived figures are those of the real run."""
    keep = tmp_path / "keep"
    argv = ["--quick", "--seeds", "1", "--episodes", "10", "--variants", "baseline,twin,twin_mux", "--workers", "1",
            "--keep", keep]
    real = benchmark("cloud_rl.py", *argv)
    _check("cloud_rl.py", real, "")
    assert real["twin_cosine_median"] is not None and real["sim_to_qpu_mean_return"] is not None
    argv += ["--no-cosine", "--no-sim-to-qpu"]
    checked = benchmark("cloud_rl.py", *argv, "--twin-as-mux")
    assert (checked["twin_as_mux_checked"], checked["twin_as_mux_derived"]) == ([0], [])
    (keep / "twin-0").rename(tmp_path / "twin-0")
    derived = benchmark("cloud_rl.py", *argv, "--twin-as-mux")
    assert (derived["twin_as_mux_checked"], derived["twin_as_mux_derived"]) == ([], [0])
    twin = {k: v for k, v in real.items() if k.startswith(("twin_solved", "twin_median", "twin_circuits", "twin_usd"))}
    assert twin and twin["twin_circuits_per_step"] > real["twin_mux_circuits_per_step"]
    assert {k: derived[k] for k in twin} == twin


def test_cloud_rl_twin_as_mux_refuses_a_twin_run_that_differs():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_cloud_rl_check", BENCH / "cloud_rl.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    row = {"update": 0, "episodes": 10, "returns": [9.0] * 10, "lengths": [9] * 10, "env_steps": 90, "loss": 0.5,
           "service_jobs": 9, "service_jobs_total": 9, "circuits_total": 18, "list_cost_total": 1800.0}
    mux = {"run_dir": "twin_mux-0", "rows": [row]}
    twin = module.twin_from_mux(mux, 97.5) | {"run_dir": "twin-0"}
    module.check_twin_from_mux(twin, mux, 97.5)
    twin["rows"] = [twin["rows"][0] | {"returns": [10.0] * 10}]
    with pytest.raises(SystemExit, match="twin-0 is not twin_mux-0 repriced"):
        module.check_twin_from_mux(twin, mux, 97.5)
