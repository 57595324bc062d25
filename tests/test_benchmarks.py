"""Benchmarks stay runnable: each accepts --quick and ends with one JSON line of figures."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
# Smaller than --quick alone, to keep CI short; each still runs every code path but Ray's.
SMOKE = {"backends.py": ["--batch", "20", "--sizes", "200,800"], "overlap.py": ["--steps", "8", "--no-ray"],
         "simulators.py": ["--batch", "50", "--no-peers"],
         "rl_cartpole.py": ["--seeds", "1", "--episodes", "20", "--overlap-episodes", "10"],
         "rl_dqn.py": ["--budget", "20"],
         "cloud_rl.py": ["--seeds", "1", "--episodes", "10", "--variants", "baseline,twin_mux", "--workers", "1"],
         "azure_loopback.py": ["--fault-rows", "100", "--rl-episodes", "1", "--learn-rows", "40", "--rate-rows", "32",
                               "--rl-env", "frozenlake"],
         "planner.py": ["--steps", "4", "--calibrate", "3", "--elastic-steps", "20"],
         "rl_envs.py": ["--seeds", "1", "--envs", "cartpole,frozenlake", "--episodes", "10"],
         "scale_out.py": ["--steps", "10", "--actor-episodes", "10", "--compression-seeds", "0", "--learner-updates",
                          "4"]}


@pytest.mark.parametrize("script", sorted(p.name for p in BENCH.glob("*.py") if not p.name.startswith("_")))
def test_benchmark_quick_ends_with_json(script, tmp_path):
    proc = subprocess.run([sys.executable, str(BENCH / script), "--quick", *SMOKE.get(script, [])], capture_output=True,
                          text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert isinstance(figures, dict) and figures
    if script == "fuzz.py":  # every fuzzed input accepted or refused with a one-line error of hqflow's own
        assert figures["crashes"] == 0 and figures["accepted"] > 0 and figures["rejected"] > 0, proc.stderr[-2000:]
    diffs = [v for k, v in figures.items() if k.endswith("max_abs_diff_vs_reference")]
    assert all(d < 1e-6 for d in diffs)
