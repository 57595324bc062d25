"""QuantumLayer's devices (issue 26): a layer's output lives where its weights live, in their dtype (as
``nn.Linear``'s), whatever device the backend computes on; inputs may come from any device, and every
gradient lands on the device and in the dtype of the tensor it belongs to.

The CPU tests pin the rule where everything is on the CPU (dtypes mixed); the ``gpu`` tests move the backend
or the weights onto CUDA (``compiled:cuda`` with CPU weights, ``layer.cuda()`` on a CPU backend, the job path)
and train the RL policies with ``--backend compiled:cuda``; they are skipped without a CUDA device.
"""
import json
import math
import warnings

import numpy as np
import pytest
import torch

from hqflow.ir import Circuit
from hqflow.torch import QuantumLayer


def _template():
    c = Circuit(3, name="devices")
    x, w = c.inputs("x", 2), c.weights("w", 5)
    c.ry(x[0], 0).rx(x[1] * 0.5 + 0.2, 1).cx(0, 1).rz(w[0], 1).ry(w[1], 2).crx(w[2], 1, 2)
    c.rx(x[0], 2).ry(w[3], 0).cz(0, 2).rx(w[4] * 2.0, 1)
    return c.build(observables=["Z0", "X1 Z2", "Y2"])


def _x(dtype=torch.float64, device="cpu"):
    x = torch.tensor(np.random.default_rng(0).uniform(-np.pi, np.pi, (4, 2)), dtype=dtype, device=device)
    return x.requires_grad_()


def _run(layer, x):
    """``layer(x)`` and a backward pass of a fixed weighting of it: (values, weights' gradient, x's gradient)."""
    out = layer(x)
    (out * torch.tensor([[0.7, -1.3, 0.4]], dtype=out.dtype, device=out.device)).sum().backward()
    return out, layer.weights.grad, x.grad


def _same_place(t: torch.Tensor, like: torch.Tensor) -> None:
    assert (t.device, t.dtype) == (like.device, like.dtype), (t.device, t.dtype, like.device, like.dtype)


# -- CPU: the rule where everything is on the CPU --------------------------------------------------------------

CASES = [("compiled", False), ("reference", False), ("reference", True)]  # (backend, gradient_in_forward)


@pytest.mark.parametrize("backend, in_forward", CASES, ids=[f"{b}-{'shift' if s else 'jobs'}" for b, s in CASES])
@pytest.mark.parametrize("w_dtype, x_dtype", [(torch.float32, torch.float64), (torch.float64, torch.float32)])
def test_the_output_and_the_gradients_follow_the_tensors_they_belong_to(backend, in_forward, w_dtype, x_dtype):
    layer = QuantumLayer(_template(), backend, seed=2, dtype=w_dtype, gradient_in_forward=in_forward)
    x = _x(x_dtype)
    out, gw, gx = _run(layer, x)
    _same_place(out, layer.weights)  # the weights' dtype, not the inputs'
    _same_place(gw, layer.weights)
    _same_place(gx, x)
    assert out.shape == (4, 3) and torch.isfinite(out).all() and gw.abs().sum() > 0 and gx.abs().sum() > 0


@pytest.mark.parametrize("backend", ["compiled", "reference"])
def test_no_inputs_and_no_rows_answer_with_the_weights_too(backend):
    c = Circuit(2, name="noinputs")
    w = c.weights("w", 2)
    c.ry(w[0], 0).cx(0, 1).rx(w[1], 1)
    layer = QuantumLayer(c.build(observables=["Z0 Z1"]), backend, seed=1, dtype=torch.float64)
    _same_place(layer(), layer.weights)
    empty = layer(torch.zeros(0, 0, dtype=torch.float32))
    assert empty.shape == (0, 1)
    _same_place(empty, layer.weights)


# -- CUDA --------------------------------------------------------------------------------------------------------

def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: torch.cuda.is_available() is False")


@pytest.mark.gpu
def test_a_cuda_backend_with_cpu_weights_answers_on_the_cpu_with_the_cpu_and_reference_values():
    """``compiled:cuda``, weights on the CPU: output and weight gradients on the CPU, an input's gradient on its
    own device (CPU or CUDA); values and gradients within 1e-5 (complex64) of the CPU program's and of the
    reference's (complex128, parameter shift); no sparse kernel warns (torch's "Sparse invariant checks" warning)."""
    _cuda()
    t = _template()
    cpu = QuantumLayer(t, "compiled", seed=2)
    ref = QuantumLayer(t, "reference", weights=cpu.weights.detach().double(), dtype=torch.float64)
    want = _run(cpu, _x(torch.float32))
    exact = _run(ref, _x(torch.float32).detach().double().requires_grad_())  # the same numbers, in float64
    for device in ("cpu", "cuda"):
        gpu = QuantumLayer(t, "compiled:cuda", seed=2)
        x = _x(torch.float32, device)
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=".*[Ss]parse.*")
            out, gw, gx = _run(gpu, x)
        _same_place(out, gpu.weights)
        _same_place(gw, gpu.weights)
        _same_place(gx, x)
        assert out.device.type == "cpu" and gx.device.type == device
        for got, a, b in zip((out, gw, gx), want, exact):
            torch.testing.assert_close(got.detach().cpu(), a.detach(), atol=1e-5, rtol=0)
            torch.testing.assert_close(got.detach().cpu().double(), b.detach(), atol=1e-5, rtol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("backend, in_forward, shots", [("compiled", False, None), ("reference", False, None),
                                                         ("reference", True, None), ("compiled", False, 500)])
def test_cuda_weights_on_a_cpu_backend_answer_on_the_gpu_with_the_cpu_layers_values(backend, in_forward, shots):
    """``layer.cuda()`` on a CPU backend (its program, its jobs, shot jobs): output and weight gradients on CUDA,
    an input's gradient on its own device, the same numbers as the layer on the CPU (the same CPU computation;
    a CUDA einsum applies the saved jacobians on the ``gradient_in_forward`` path)."""
    _cuda()
    t = _template()
    kw = dict(seed=2, dtype=torch.float64, gradient_in_forward=in_forward, shots=shots)
    want = _run(QuantumLayer(t, backend, **kw), _x())
    for device in ("cpu", "cuda"):
        layer = QuantumLayer(t, backend, **kw).cuda()
        x = _x(device=device)
        out, gw, gx = _run(layer, x)
        assert out.device.type == "cuda" and gw.device.type == "cuda" and gx.device.type == device
        _same_place(gx, x)
        for got, a in zip((out, gw, gx), want):
            torch.testing.assert_close(got.detach().cpu(), a.detach(), atol=1e-12, rtol=1e-12)


def _metrics(run_dir) -> list[dict]:
    with open(run_dir / "metrics.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


TRAIN = [("reinforce", ["--set", "batch_episodes=2", "--episodes", "4"]),
         ("ppo", ["--set", "num_envs=2", "--set", "num_steps=64", "--episodes", "8"]),
         ("dqn", ["--set", "batch_size=8", "--episodes", "2"])]


@pytest.mark.gpu
@pytest.mark.parametrize("algo, flags", TRAIN, ids=[a for a, _ in TRAIN])
def test_hqflow_train_cartpole_on_compiled_cuda_runs_as_on_the_cpu(algo, flags, tmp_path, monkeypatch, capsys):
    """``hqflow train cartpole --backend compiled:cuda`` (issue 26: it stopped in its first rollout on mixed
    devices) runs two updates, and its first update's episodes and loss are the CPU run's (the same seeds;
    complex64 on either device rounds a probability differently only in its 7th digit); its policy evaluates
    greedily on CUDA as on the CPU."""
    _cuda()
    from hqflow.cli import main
    from hqflow.workloads.rl.trained import evaluate

    monkeypatch.chdir(tmp_path)
    runs = {}
    for backend in ("compiled", "compiled:cuda"):
        run_dir = tmp_path / backend.replace(":", "-")
        argv = ["train", "cartpole", "--algo", algo, "--backend", backend, "--set", "n_layers=2", *flags,
                "--run-dir", str(run_dir), "--no-tensorboard", "--json"]
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message=".*[Ss]parse invariant.*")
            assert main(argv) == 0, capsys.readouterr().err
        runs[backend] = _metrics(run_dir)
    cpu, gpu = runs["compiled"], runs["compiled:cuda"]
    assert len(gpu) == len(cpu) >= 2
    assert gpu[0]["returns"] == cpu[0]["returns"]
    assert gpu[0]["loss"] == pytest.approx(cpu[0]["loss"], rel=1e-3, abs=1e-5, nan_ok=True)
    assert all(math.isfinite(m["loss"]) or algo == "dqn" for m in gpu)
    trained = tmp_path / "compiled-cuda"
    on_gpu = evaluate(trained, episodes=1, max_steps=60)  # the run's own backend, compiled:cuda
    assert on_gpu["returns"] == evaluate(trained, episodes=1, max_steps=60, backend="compiled")["returns"]
