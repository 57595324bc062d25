"""Quantum policies: circuit layout, probabilities, and gradients against finite differences
(compiled autograd and parameter shift on the reference backend) for λ, θ and w."""
import numpy as np
import pytest
import torch
from hqflow.backends import CircuitBatch, get_backend
from hqflow.backends.base import Backend
from hqflow.workloads.rl.policies import GaussianPQC, QValuePQC, SoftmaxPQC, pqc_template


def test_template_layout():
    t = pqc_template(4, 5)
    assert (t.n_inputs, t.n_weights) == (20, 72)
    assert len(t.observables) == 1
    layer = [(op.name, op.wires) for op in pqc_template(3, 1).ops]
    def rot(q):
        return [("rx", (q,)), ("ry", (q,)), ("rz", (q,))]

    assert layer == (rot(0) + rot(1) + rot(2) + [("cz", (0, 1)), ("cz", (1, 2)), ("cz", (2, 0))]
                     + [("rx", (q,)) for q in range(3)] + rot(0) + rot(1) + rot(2))
    assert [op.wires for op in pqc_template(2, 2).ops if op.name == "cz"] == [(0, 1), (0, 1)]  # one CZ for n = 2
    # encoding angles are the inputs, layer-major; weights are 3 per qubit per variational layer
    enc = [op.angles[0].index for op in pqc_template(2, 2).ops if op.angles and op.angles[0].kind == "input"]
    assert enc == [0, 1, 2, 3]


def test_probabilities_and_shapes():
    pol = SoftmaxPQC(n_qubits=4, n_layers=2, n_actions=3, seed=0)
    s = torch.randn(7, 4)
    p = pol(s)
    assert p.shape == (7, 3) and torch.allclose(p.sum(1), torch.ones(7))
    assert torch.allclose(pol.log_probs(s).exp(), p, atol=1e-6)
    assert torch.equal(pol.output.detach(), torch.tensor([1.0, -1.0, 1.0]))  # (-1)^a
    assert pol.backend == "compiled" and pol.input_scaling.shape == (2, 4)
    assert ((pol.weights >= 0) & (pol.weights <= np.pi)).all()
    assert torch.equal(SoftmaxPQC(n_layers=2, seed=3).weights, SoftmaxPQC(n_layers=2, seed=3).weights)
    groups = pol.param_groups(0.1, 0.01, 0.1)
    assert [g["lr"] for g in groups] == [0.1, 0.01, 0.1]
    assert [g["params"][0] for g in groups] == [pol.input_scaling, pol.weights, pol.output]


def test_fewer_features_are_zero_padded():
    pol = SoftmaxPQC(n_qubits=4, n_layers=2, seed=0)
    s = torch.randn(3, 2)
    assert torch.allclose(pol(s), pol(torch.cat([s, torch.zeros(3, 2)], 1)))


def test_encodings():
    s = torch.tensor([[0.5, -1.0, 2.0, 0.0]])
    for enc, f in (("plain", lambda x: x), ("tanh", torch.tanh), ("atan", torch.atan)):
        pol = SoftmaxPQC(n_layers=2, encoding=enc, seed=0)
        with torch.no_grad():
            pol.input_scaling.mul_(1.5)
        assert torch.allclose(pol.angles(s), f(1.5 * s).repeat(1, 2))


def test_bad_input():
    pol = SoftmaxPQC(n_qubits=4, n_layers=1)
    with pytest.raises(ValueError, match="n_features <= n_qubits"):
        pol(torch.zeros(2, 5))
    with pytest.raises(ValueError, match="unknown encoding"):
        SoftmaxPQC(encoding="cos")
    with pytest.raises(ValueError, match="one observable per action"):
        QValuePQC(n_actions=3)


def _loss(pol, s, c):
    return (pol.log_probs(s) * c).sum()


def _check_grads(pol, atol):
    """Autograd gradients of a fixed linear function of log π against central differences."""
    g = torch.Generator().manual_seed(1)
    s = torch.randn(5, 4, generator=g, dtype=torch.float64)
    c = torch.randn(5, pol.n_actions, generator=g, dtype=torch.float64)
    with torch.no_grad():
        pol.input_scaling.copy_(torch.rand(pol.input_scaling.shape, generator=g, dtype=torch.float64) + 0.5)
        pol.output.mul_(1.3)
    pol.zero_grad()
    _loss(pol, s, c).backward()
    eps = 1e-6
    for p in (pol.input_scaling, pol.weights, pol.output):
        fd = torch.zeros_like(p).reshape(-1)
        flat = p.data.reshape(-1)
        for j in range(flat.numel()):
            old = flat[j].item()
            with torch.no_grad():
                flat[j] = old + eps
                up = _loss(pol, s, c).item()
                flat[j] = old - eps
                down = _loss(pol, s, c).item()
                flat[j] = old
            fd[j] = (up - down) / (2 * eps)
        np.testing.assert_allclose(p.grad.reshape(-1).numpy(), fd.numpy(), atol=atol)


def test_compiled_gradients_match_finite_differences():
    _check_grads(SoftmaxPQC(n_layers=2, seed=0, dtype=torch.float64), atol=1e-6)


def test_param_shift_gradients_match_finite_differences():
    pol = SoftmaxPQC(n_layers=2, seed=0, backend="reference", dtype=torch.float64)
    assert pol.backend == "reference"
    _check_grads(pol, atol=1e-6)


def test_param_shift_matches_compiled():
    g = torch.Generator().manual_seed(2)
    s = torch.randn(4, 4, generator=g, dtype=torch.float64)
    grads = []
    for backend in ("compiled", "reference"):
        pol = SoftmaxPQC(n_layers=2, seed=5, backend=backend, dtype=torch.float64, encoding="tanh")
        (pol.log_probs(s)[:, 0].sum()).backward()
        grads.append([p.grad.clone() for p in pol.parameters()])
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-9)


def test_qvalues_against_reference_backend():
    pol = QValuePQC(n_layers=3, seed=0, dtype=torch.float64)
    with torch.no_grad():
        pol.output.copy_(torch.tensor([2.0, 0.5], dtype=torch.float64))
    s = torch.randn(6, 4, dtype=torch.float64)
    q = pol(s)
    assert q.shape == (6, 2) and torch.equal(QValuePQC().output.detach(), torch.ones(2))
    x = pol.angles(s).detach().numpy()
    ev = get_backend("reference").submit(CircuitBatch.make(pol.template, x, pol.weights.detach().numpy())).result().values
    np.testing.assert_allclose(q.detach().numpy(), np.array([2.0, 0.5]) * (1 + ev) / 2, atol=1e-10)
    assert pol.template.observables == pqc_template(4, 3, ["Z0 Z1", "Z2 Z3"]).observables
    q_ref = QValuePQC(n_layers=3, seed=0, dtype=torch.float64, backend="reference")
    with torch.no_grad():
        q_ref.output.copy_(pol.output)
    assert torch.allclose(q_ref(s), q, atol=1e-10)


def test_param_shift_rows_only_when_a_gradient_is_needed(monkeypatch):
    import hqflow.gradients as G

    from hqflow.gradients import param_shift

    calls = []  # the layer's jobs get their rows from the one dispatch on the method, gradients.estimate
    monkeypatch.setattr(G, "param_shift", lambda *a, **k: calls.append(k["wrt"]) or param_shift(*a, **k))
    pol = SoftmaxPQC(n_layers=1, backend="reference")
    with torch.no_grad():
        pol(torch.zeros(2, 4))
    assert calls == []
    pol(torch.zeros(2, 4))[:, 0].sum().backward()
    assert calls == ["both"] and pol.weights.grad is not None


def test_parameter_names_are_stable():
    """Checkpoints of earlier runs load: the heads' parameter names stay these."""
    assert {n for n, _ in SoftmaxPQC(n_layers=1).named_parameters()} == {"weights", "input_scaling", "output"}
    assert {n for n, _ in QValuePQC(n_layers=1).named_parameters()} == {"weights", "input_scaling", "output"}
    assert ({n for n, _ in GaussianPQC(n_layers=1).named_parameters()}
            == {"weights", "input_scaling", "output", "log_std"})


class _Counting(Backend):
    """The reference backend, counting its jobs and their rows."""

    def __init__(self):
        self._ref = get_backend("reference")
        self.name, self.capabilities, self.rows = "counting", self._ref.capabilities, []

    def submit(self, batch):
        self.rows.append(batch.size)
        return self._ref.submit(batch)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_one_job_per_forward_and_backward_on_a_job_backend(dtype):
    backend = _Counting()
    pol = SoftmaxPQC(n_layers=1, n_actions=2, backend=backend, seed=0, dtype=dtype)
    s = torch.randn(3, 4, dtype=dtype)
    pol.log_probs(s)[:, 0].sum().backward()  # the values and the parameter-shift rows: one job
    assert len(backend.rows) == 1 and backend.rows[0] > 3
    assert pol.weights.grad.dtype == dtype and pol.input_scaling.grad.abs().sum() > 0
    with torch.no_grad():
        pol(s)
    assert backend.rows[1:] == [3]  # a values job
    pol.greedy(s.float().numpy())
    assert backend.rows[2:] == [3]
