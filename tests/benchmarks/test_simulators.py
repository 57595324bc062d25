"""benchmarks/simulators.py's --device, --wide and --learner (issue 26): the CPU paths run here; the CUDA
paths run where a GPU is (the gpu mark), and without one --device cuda refuses in one line."""
import importlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
SCRIPT = BENCH / "simulators.py"


def run(*args, timeout=300):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


def figures_of(proc) -> dict:
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def sim():
    sys.path.insert(0, str(BENCH))  # the script imports its neighbour _circuits
    try:
        yield importlib.import_module("simulators")
    finally:
        sys.path.remove(str(BENCH))


def exits(sim, capsys, *argv) -> subprocess.CompletedProcess:
    """``simulators.py ARGV`` through its ``main(argv)`` here, for what it refuses before it measures anything: the
    status the script exits with (main's return value, or argparse's own exit), its stdout and stderr."""
    capsys.readouterr()
    try:
        code = sim.main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(argv, code, out, err)


def test_device_cuda_without_cuda_is_one_line_and_exit_2(sim, capsys):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: --device cuda runs")
    proc = exits(sim, capsys, "--device", "cuda", "--quick")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "CUDA is not available" in proc.stderr


@pytest.mark.parametrize("bad", ["16,x", "1", "16,40"])
def test_bad_wide_qubits_exit_2(bad, sim, capsys):
    proc = exits(sim, capsys, "--wide", "--wide-qubits", bad)
    assert proc.returncode == 2
    assert "--wide-qubits" in proc.stderr.strip().splitlines()[-1]


def test_directional_reference_is_the_gradient_along_each_direction(sim):
    from _circuits import policy_circuit

    t = policy_circuit(4, 2)
    rng = np.random.default_rng(3)
    x, w = rng.uniform(-np.pi, np.pi, (3, t.n_inputs)), rng.uniform(-np.pi, np.pi, t.n_weights)
    values, grad = sim.reference(t, x, w)
    values_d, dirs, dderiv = sim.reference_directional(t, x, w, n_dirs=3)
    assert dirs.shape == (3, t.n_weights)
    np.testing.assert_allclose(np.linalg.norm(dirs, axis=1), 1.0)
    np.testing.assert_allclose(values_d, values, atol=1e-12)
    np.testing.assert_allclose(dderiv, dirs @ grad, atol=1e-7)


def test_jax_runner_matches_the_reference(sim):
    """tensorcircuit-ng on JAX (what --device cuda times), here on JAX's CPU where both are installed."""
    tc = pytest.importorskip("tensorcircuit", reason="tensorcircuit-ng not installed (pip install '.[bench]')")
    pytest.importorskip("jax", reason="JAX not installed")
    from _circuits import policy_circuit

    K = tc.set_backend("jax")
    try:
        tc.set_dtype("complex64")
        t = policy_circuit(4, 2)
        rng = np.random.default_rng(0)
        x, w = rng.uniform(-np.pi, np.pi, (5, t.n_inputs)), rng.uniform(-np.pi, np.pi, t.n_weights)
        values, grad = sim.JaxRunner(sim._tc_one_row(tc, K, t)).values_and_grad(x, w)
        ref_values, ref_grad = sim.reference(t, x, w)
        assert np.abs(values - ref_values).max() < 1e-5 and np.abs(grad - ref_grad).max() < 1e-4
    finally:
        tc.set_backend("numpy")


def test_wide_section_on_cpu():  # in a process of its own: the section caps its process's address space
    figures = figures_of(run("--quick", "--wide", "--wide-qubits", "6"))
    assert figures["compiled_ok"] is True
    assert figures["cpu_wide_6q_rows"] == 8
    for mode in ("fwd", "fwd_bwd"):
        assert figures[f"cpu_wide_6q_{mode}_compiled_rows_per_s"] > 0
    assert figures["cpu_wide_6q_compiled_max_abs_diff"] < 1e-5
    assert figures["cpu_wide_6q_compiled_grad_max_abs_diff"] < 1e-5
    # the keys are there in every --wide run, null where not measured
    assert figures["cpu_wide_16q_fwd_vs_lightning"] is None and figures["cpu_wide_20q_fwd_vs_lightning"] is None
    if figures.get("cpu_wide_6q_fwd_pl_lightning_qubit_rows_per_s"):
        ratio = figures["cpu_wide_6q_fwd_compiled_rows_per_s"] / figures["cpu_wide_6q_fwd_pl_lightning_qubit_rows_per_s"]
        assert figures["cpu_wide_6q_fwd_vs_lightning"] == pytest.approx(ratio, rel=1e-2)
        assert figures["cpu_wide_6q_pl_lightning_qubit_max_abs_diff"] < 1e-5


def test_learner_section_on_cpu(benchmark):
    figures = benchmark("simulators.py", "--quick", "--learner")
    assert figures["learner_s_per_update_cpu"] > 0
    assert figures["learner_updates_timed_cpu"] == 3  # 40 episodes, 10 per update, the first a warm-up
    assert figures["learner_env_steps_per_update_cpu"] > 0
    if not torch.cuda.is_available():
        assert figures["learner_s_per_update_cuda"] is None


@pytest.mark.gpu
def test_device_cuda_tables_and_wide():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: --device cuda needs one")
    figures = figures_of(run("--quick", "--device", "cuda", "--peers", "compiled,pyqtorch",
                             "--circuits", "4q", "--batch", "64", "256"))
    assert figures["device"] == "cuda" and figures["device_name"]
    assert figures["compiled_ok"] is True
    assert figures["cuda_compiled_4q_max_abs_diff"] < 1e-5 and figures["cuda_compiled_4q_grad_max_abs_diff"] < 1e-5
    assert figures["cuda_compiled_circuits_per_s_4q_b256"] > 0
    if "cuda_pyqtorch_4q_max_abs_diff" in figures:  # a peer that is not installed has no figures
        assert figures["cuda_pyqtorch_4q_max_abs_diff"] < 1e-4
    assert "cuda_vs_best_gpu_peer_4q_b1000" in figures  # the keys, null where not measured
    wide = figures_of(run("--quick", "--device", "cuda", "--wide", "--wide-qubits", "10"))
    assert wide["cuda_wide_10q_fwd_bwd_compiled_rows_per_s"] > 0
    assert wide["cuda_wide_10q_compiled_max_abs_diff"] < 1e-5
    assert "cuda_28q_fwd_bwd_s" in wide
