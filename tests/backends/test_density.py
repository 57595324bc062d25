"""``density``: exact and differentiable under a target's noise model; the noise table; ``noise=`` on aer and
emulated-qpu; their one-line errors (through ``get_backend`` and the CLI)."""
import json

import numpy as np
import pytest
import torch

from hqflow.backends import BackendError, CircuitBatch, get_backend
from hqflow.backends.azure.cost import load_prices
from hqflow.backends.compiled.density import FUSE, DensityProgram
from hqflow.backends.noise import NoiseModel, depolarizing, load_table, noise_model, table_problems
from hqflow.cli import main
from hqflow.gradients import param_shift
from hqflow.ir import Circuit
from hqflow.ir.random import random_template
from hqflow.workloads.rl.policies import pqc_template

ASYMMETRIC = NoiseModel(0.02, 0.05, 0.03, 0.06)  # strong enough that a wrong channel shows at 1e-3


def _cases(seed: int, count: int, max_qubits: int = 4):
    rng = np.random.default_rng(seed)
    for k in range(count):
        t = random_template(rng, int(rng.integers(1, max_qubits + 1)))
        rows = int(rng.integers(1, 4)) if k % 2 else 4**t.n_qubits + 3  # the direct path, and the fused one
        x = rng.uniform(-np.pi, np.pi, (rows, t.n_inputs))
        w = rng.uniform(-np.pi, np.pi, (rows, t.n_weights) if k % 3 == 0 else (t.n_weights,))
        yield t, x, w


def _three_wire_circuit():
    """ccx and cswap (compounded channels), crz and cp (decomposed by aer), u, every kind of angle."""
    c = Circuit(3, name="three")
    x, w = c.inputs("x", 2), c.weights("w", 3)
    c.ry(x[0], 0).h(1).crz(w[0], 0, 1).ccx(0, 1, 2).rx(x[1], 2).cswap(2, 0, 1).cp(w[1], 1, 2).u(w[2], 0.3, x[0], 0)
    return c.build(observables=["Z0 Z1 Z2", [(0.5, "X0 Y2"), (-1.0, "Z1")]])


def test_noiseless_density_equals_reference_on_random_circuits():
    ref, den = get_backend("reference"), get_backend("density", dtype="complex128")
    for t, x, w in _cases(35, 16):
        for template in (t, t.with_observables(())):
            b = CircuitBatch.make(template, x, w)
            got, want = den.run(b), ref.run(b)
            np.testing.assert_allclose(got.values if template.observables else got.probs,
                                       want.values if template.observables else want.probs, atol=1e-12, rtol=0)


@pytest.fixture(scope="module")
def aer_and_density():
    return {m if isinstance(m, str) else "asymmetric": (get_backend("aer", noise=m),
                                                        get_backend("density", noise=m, dtype="complex128"))
            for m in (ASYMMETRIC, "ionq.qpu.aria-1", "quantinuum.qpu.h2-1")}


def test_noisy_density_equals_aer_density_matrix_with_the_same_model(aer_and_density):
    cases = list(_cases(36, 6, max_qubits=3))
    rng = np.random.default_rng(1)
    t = _three_wire_circuit()
    cases.append((t, rng.normal(size=(3, 2)), rng.normal(size=3)))
    names = list(aer_and_density)
    for k, (t, x, w) in enumerate(cases):
        aer, den = aer_and_density[names[k % len(names)]]
        for template in (t, t.with_observables(())):
            b = CircuitBatch.make(template, x[:3], w[:3] if w.ndim == 2 else w)
            got, want = den.run(b), aer.run(b)
            np.testing.assert_allclose(got.values if template.observables else got.probs,
                                       want.values if template.observables else want.probs, atol=1e-9, rtol=0,
                                       err_msg=f"case {k}, {names[k % len(names)]}")
    noiseless = get_backend("density", dtype="complex128").run(CircuitBatch.make(t, x[:3], w)).values
    noisy = aer_and_density["asymmetric"][0].run(CircuitBatch.make(t, x[:3], w)).values
    assert np.abs(noiseless - noisy).max() > 1e-3  # the noise shows


def test_noisy_aer_shots_lie_near_the_exact_noisy_values(aer_and_density):
    aer, den = aer_and_density["asymmetric"]
    t = _three_wire_circuit()
    rng = np.random.default_rng(8)
    x, w = rng.normal(size=(4, 2)), rng.normal(size=3)
    exact = den.run(CircuitBatch.make(t, x, w)).values
    shot = aer.run(CircuitBatch.make(t, x, w, shots=4000, seed=1))
    assert np.all(np.abs(shot.values - exact) <= 5 * shot.stderr + 1e-12)
    probs = den.run(CircuitBatch.make(t.with_observables(()), x[:1], w)).probs[0]
    counts = aer.run(CircuitBatch.make(t.with_observables(()), x[:1], w, shots=4000, seed=1)).counts[0]
    freq = np.array([counts.get(format(i, "03b"), 0) for i in range(8)]) / 4000
    assert np.all(np.abs(freq - probs) <= 5 * np.sqrt(probs * (1 - probs) / 4000) + 1e-12)


def test_light_cone_is_exact_under_noise():
    """Gates outside the observables' light cone cannot reach them: the channels are unital."""
    c = Circuit(3)
    x, w = c.inputs("x", 1), c.weights("w", 2)
    c.ry(x[0], 0).rx(w[0], 2).cx(0, 1).ry(w[1], 2).cx(1, 0)
    t = c.build(observables=["Z0", "X0 Z1"])
    args = (np.array([[0.4], [1.3]]), np.array([0.7, -0.2]))
    full = DensityProgram(t, ASYMMETRIC, torch.complex128, lightcone=False)
    cone = DensityProgram(t, ASYMMETRIC, torch.complex128)
    assert cone._sub is not None and cone._sub.template.n_qubits == 2
    torch.testing.assert_close(cone(*args), full(*args), atol=1e-13, rtol=0)
    w = torch.tensor(args[1], requires_grad=True)
    cone(args[0], w).sum().backward()
    assert w.grad.tolist() == [0.0, 0.0]  # the weights on wire 2 reach no observable


@pytest.mark.parametrize("per_row", [False, True])
def test_program_gradients_match_finite_differences(per_row):
    t = _three_wire_circuit()
    prog = get_backend("density", noise=ASYMMETRIC).program(t, dtype=torch.complex128)
    rng = np.random.default_rng(2)
    x = torch.tensor(rng.normal(size=(3, 2)), requires_grad=True)
    w = torch.tensor(rng.normal(size=(3, 3) if per_row else 3), requires_grad=True)
    coeff = torch.tensor(rng.normal(size=(3, 2)))
    (prog(x, w) * coeff).sum().backward()
    for param, grad in ((x, x.grad), (w, w.grad)):
        fd = torch.zeros_like(param)
        for i in np.ndindex(*param.shape):
            with torch.no_grad():
                param[i] += 1e-6
                up = (prog(x, w) * coeff).sum()
                param[i] -= 2e-6
                down = (prog(x, w) * coeff).sum()
                param[i] += 1e-6
            fd[i] = (up - down) / 2e-6
        torch.testing.assert_close(grad, fd, atol=1e-7, rtol=0)


def test_parameter_shift_on_density_is_exact():
    """The channels do not depend on the angles, so f(t) stays a trigonometric polynomial in each gate's angle
    with the noiseless frequencies (Heisenberg picture: the channels after the gate act on the observable, those
    before on the state): the shift rules stay exact, here against autograd to 1e-10."""
    t = _three_wire_circuit()
    den = get_backend("density", noise=ASYMMETRIC, dtype="complex128")
    rng = np.random.default_rng(3)
    x, w = rng.normal(size=(2, 2)), rng.normal(size=3)
    batch, read = param_shift(t, x, w, wrt="both")
    grad = read(den.run(batch))
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    out = den.program(t)(xt, wt)
    for j in range(out.shape[1]):
        for b in range(out.shape[0]):
            gx, gw = torch.autograd.grad(out[b, j], (xt, wt), retain_graph=True)
            np.testing.assert_allclose(grad.jacobian[b, j], gw.numpy(), atol=1e-10)
            np.testing.assert_allclose(grad.input_jacobian[b, j], gx[b].numpy(), atol=1e-10)


def test_row_seeded_shots_reproduce_per_row_and_lie_near_the_noisy_values():
    t = pqc_template(2, 2)
    den = get_backend("density", noise="ionq.qpu.aria-1")
    rng = np.random.default_rng(4)
    x, w = rng.normal(size=(40, t.n_inputs)), rng.normal(size=t.n_weights)
    whole = den.run(CircuitBatch.make(t, x, w, shots=2000, seed=9, per_row=True))
    cut = [den.run(b) for b in CircuitBatch.make(t, x, w, shots=2000, seed=9, per_row=True).split(7)]
    np.testing.assert_array_equal(np.concatenate([r.values for r in cut]), whole.values)
    exact = den.run(CircuitBatch.make(t, x, w)).values
    assert np.all(np.abs(whole.values - exact) <= 5 * whole.stderr + 1e-12)
    assert not np.array_equal(whole.values, den.run(CircuitBatch.make(t, x, w, shots=2000, seed=10,
                                                                      per_row=True)).values)
    probs = den.run(CircuitBatch.make(t.with_observables(()), x[:5], w)).probs
    counts = den.run(CircuitBatch.make(t.with_observables(()), x[:5], w, shots=5000, seed=9, per_row=True)).counts
    again = den.run(CircuitBatch.make(t.with_observables(()), x[:5], w, shots=5000, seed=9, per_row=True)).counts
    assert counts == again
    for row, c in zip(probs, counts):
        freq = np.array([c.get(format(i, "02b"), 0) for i in range(4)]) / 5000
        assert np.all(np.abs(freq - row) <= 5 * np.sqrt(row * (1 - row) / 5000) + 1e-12)


def test_aria_noise_lowers_the_policy_readout():
    t = pqc_template(4, 5)
    rng = np.random.default_rng(5)
    x, w = rng.uniform(-1, 1, (50, t.n_inputs)), rng.uniform(-np.pi, np.pi, t.n_weights)
    noisy = get_backend("density", noise="ionq.qpu.aria-1").run(CircuitBatch.make(t, x, w)).values
    clean = get_backend("density").run(CircuitBatch.make(t, x, w)).values
    ratio = np.abs(noisy).mean() / np.abs(clean).mean()
    assert 0.5 < ratio < 0.95, ratio


def test_emulated_qpu_with_noise_runs_density_under_it():
    t = pqc_template(2, 2)
    rng = np.random.default_rng(6)
    b = CircuitBatch.make(t, rng.normal(size=(4, t.n_inputs)), rng.normal(size=t.n_weights))
    with get_backend("emulated-qpu", noise="ionq.qpu.aria-1", wrapped="compiled") as qpu:
        assert qpu.wrapped.name == "density" and qpu.capabilities.row_seeded
        got = qpu.submit(b).result(timeout=60).values
    np.testing.assert_array_equal(got, get_backend("density", noise="ionq.qpu.aria-1").run(b).values)


def test_the_noise_table():
    assert table_problems() == []
    targets = load_table()["targets"]
    assert set(load_prices()["targets"]) <= set(targets)  # every target of the price table says what it has
    modeled = 0
    for name in targets:
        try:
            m = noise_model(name)
        except BackendError as exc:
            assert str(exc).startswith(f"no published noise figures for {name}: ") and "\n" not in str(exc)
            continue
        modeled += 1
        assert m.source and m.date and all(0 <= p < 1 for p in (m.p1q, m.p2q, m.p1_given_0, m.p0_given_1))
    assert modeled >= 5
    aria = noise_model("azure:ionq.qpu.aria-1")
    assert aria.p1q == pytest.approx(2 * 0.0005) and aria.p2q == pytest.approx(4 / 3 * 0.004)
    assert aria.p1_given_0 == aria.p0_given_1 == pytest.approx(0.0039)
    assert aria.gate(3) == pytest.approx(1 - (1 - aria.p2q) ** 6) and aria.gate(4) > aria.gate(3)
    aria2 = noise_model("ionq.qpu.aria-2")
    assert (aria2.p1q, aria2.p2q, aria2.p1_given_0) == (aria.p1q, aria.p2q, aria.p1_given_0) and aria.source in aria2.source
    assert noise_model("quantinuum.sim.h2-1e").p2q == noise_model("quantinuum.qpu.h2-1").p2q > 0
    assert noise_model("ionq.simulator").ideal
    assert depolarizing(0.75, 1) == pytest.approx(0.5)  # p = (1 - F) d / (d - 1)


@pytest.mark.parametrize("name, options, message", [
    ("density", {"noise": "ionq.qpu.nope"}, "unknown noise target 'ionq.qpu.nope'; known: ionq.simulator"),
    ("density", {"noise": "rigetti.qpu.ankaa-3"}, "no published noise figures for rigetti.qpu.ankaa-3: "),
    ("density", {"max_qubits": 15}, "density: max_qubits must be an int between 1 and 14, got 15"),
    ("aer", {"noise": "ionq.qpu.forte-1"}, "no published noise figures for ionq.qpu.forte-1: "),
    ("aer", {"noise": "ionq.qpu.aria-1", "method": "statevector"}, "aer: noise needs method 'density_matrix'"),
    ("emulated-qpu", {"noise": "ionq.qpu.aria-1", "wrapped": "aer"}, "emulated-qpu: noise runs on the 'density' "
                                                                     "simulator, so wrapped must be left"),
])
def test_one_line_errors_through_get_backend_and_the_cli(name, options, message, capsys, monkeypatch):
    from hqflow.workloads import get_workload

    monkeypatch.setattr(get_workload("vqe"), "run", lambda *a, **k: pytest.fail("ran before its options were checked"))
    with pytest.raises(BackendError, match="^" + message.replace("(", r"\(").replace(")", r"\)")) as info:
        get_backend(name, **options)
    assert "\n" not in str(info.value)
    argv = ["run", "vqe", "--backend", name] + [a for k, v in options.items() for a in ("--backend-opt", f"{k}={v}")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


def test_a_density_backends_name_suffix_is_its_noise_target(capsys, monkeypatch):
    from hqflow.workloads.rl import runner

    assert get_backend("density:ionq.qpu.aria-1").noise == noise_model("ionq.qpu.aria-1")
    monkeypatch.setattr(runner, "train", lambda *a, **k: pytest.fail("trained before its backend was checked"))
    assert main(["train", "cartpole", "--backend", "density:ionq.qpu.nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unknown noise target 'ionq.qpu.nope'" in err


def test_a_circuit_wider_than_max_qubits_is_one_line():
    den = get_backend("density", max_qubits=2)
    t = pqc_template(3, 1)
    for call in (lambda: den.program(t), lambda: den.submit(CircuitBatch.make(t, np.zeros((1, 3)),
                                                                             np.zeros(t.n_weights)))):
        with pytest.raises(BackendError, match="has 3 qubits but backend 'density' allows at most 2"):
            call()


def test_backends_lists_density_with_autograd(capsys):
    assert main(["backends", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    row = next(r for r in rows if r["name"] == "density")
    assert row["available"] and row["gradient"] == "autograd" and row["row_seeded"] and row["max_qubits"] == 12


def test_a_quantum_layer_trains_through_the_noisy_program():
    from hqflow.torch import QuantumLayer

    t = pqc_template(2, 2)
    layer = QuantumLayer(t, backend=("density", {"noise": "quantinuum.qpu.h2-1"}), seed=0)
    out = layer(torch.rand(5, t.n_inputs))
    out.sum().backward()
    assert out.shape == (5, 1) and layer.weights.grad is not None and layer.weights.grad.abs().sum() > 0


def test_the_fused_and_direct_paths_agree_past_the_threshold(monkeypatch):
    t = next(_cases(37, 1, max_qubits=3))[0]
    prog = DensityProgram(t, ASYMMETRIC, torch.complex128)
    x, w = np.random.default_rng(7).normal(size=(70, t.n_inputs)), np.ones(t.n_weights)
    fused = prog(x, w)
    monkeypatch.setattr("hqflow.backends.compiled.density.FUSE", 0)
    torch.testing.assert_close(prog(x, w), fused, atol=1e-13, rtol=0)
    assert FUSE >= 4**3


def test_the_readme_snippet_runs_and_says_true():
    import re
    import runpy
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if 'noise="ionq.qpu.aria-1"' in b)
    ns = runpy.run_path(str(_write(block)), run_name="readme_noise")
    clean = get_backend("density").run(ns["batch"]).values
    assert np.all(np.abs(ns["noisy"]) < np.abs(clean)) and callable(ns["program"])


def _write(code: str):
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp()) / "readme_noise.py"
    path.write_text(code)
    return path
