"""Twin gradients (issue 35, item 1): the QPU acts, one circuit per environment step; the learner differentiates a
local twin, and sees the QPU's values as acted (``policies.twin_offsets``)."""
import json

import numpy as np
import pytest
import torch

import hqflow as hq
from hqflow.backends import get_backend
from hqflow.engine.distribution import Pipelined, Sync
from hqflow.gradients import param_shift
from hqflow.ir import Circuit
from hqflow.torch import QuantumLayer
from hqflow.workloads.rl import dqn, ppo, reinforce, runner
from hqflow.workloads.rl.policies import learning_on_twin


def _template():
    c = Circuit(2, name="t")
    x, w = c.inputs("x", 2), c.weights("w", 4)
    c.ry(x[0], 0).ry(x[1], 1).rx(w[0], 0).rz(w[1], 1).cx(0, 1).ry(w[2], 0).crx(w[3], 0, 1)
    return c.build(observables=["Z0", "Z0 Z1", "X1"])


def test_a_twin_layer_gives_the_backends_values_and_the_twins_gradient():
    t = _template()
    x = torch.tensor([[0.3, -0.7], [1.1, 0.4]], dtype=torch.float64, requires_grad=True)
    layer = QuantumLayer(t, "reference", shots=2000, seed=4, dtype=torch.float64, gradient="twin")
    out = layer(x)
    again = QuantumLayer(t, "reference", shots=2000, seed=4, dtype=torch.float64, weights=layer.weights.detach())
    np.testing.assert_array_equal(out.detach().numpy(), again(x.detach()).detach().numpy())  # the backend's values
    (out * torch.tensor([[1.0, -2.0, 0.5]], dtype=torch.float64)).sum().backward()
    exact = QuantumLayer(t, "compiled", dtype=torch.float64, weights=layer.weights.detach())
    x2 = x.detach().clone().requires_grad_(True)
    (exact(x2) * torch.tensor([[1.0, -2.0, 0.5]], dtype=torch.float64)).sum().backward()
    np.testing.assert_allclose(layer.weights.grad.numpy(), exact.weights.grad.numpy(), atol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), x2.grad.numpy(), atol=1e-12)
    # and the twin's gradient of exact values is parameter shift's
    batch, post = param_shift(t, x.detach().numpy(), layer.weights.detach().numpy())
    jac = post(get_backend("reference").run(batch)).jacobian
    np.testing.assert_allclose(layer.weights.grad.numpy(), np.einsum("bo,bow->w", np.array([[1.0, -2.0, 0.5]] * 2),
                                                                     jac), atol=1e-10)


def test_a_twin_must_differentiate_in_process():
    with pytest.raises(ValueError, match="gradient='twin' needs a twin that differentiates in process"):
        QuantumLayer(_template(), "reference", gradient="twin", twin="reference")
    with pytest.raises(ValueError, match="gradient must be 'param-shift', 'spsa' or 'twin', got 'tw'"):
        QuantumLayer(_template(), "reference", gradient="tw")


QPU = {"qpu": [("emulated-qpu", {"wrapped": "compiled", "price_as": "ionq.qpu.aria-1", "seed": 3})]}
CFG = reinforce.Config(n_layers=2, batch_episodes=3, max_episodes=9, seed=2, backend="qpu", gradient="twin", groups=1,
                       num_envs=3, autoreset=True,
                       stop_when_solved=False, dtype="float64", lr_in=0.5, lr_var=0.5, lr_out=0.5, beta=5.0)


def test_with_an_exact_qpu_a_twin_run_learns_what_the_exact_gradient_learns():
    """A perfect twin (the QPU exact and noiseless): the twin's gradient is the exact one, so a twin run on the QPU
    and an autograd run in process take the same steps; the QPU runs one circuit per env step, the learner none."""
    exact_qpu = {"qpu": [("emulated-qpu", {"wrapped": "reference", "price_as": "ionq.qpu.aria-1"})]}  # float64
    twin = runner.train("reinforce", CFG, Sync(), backends=exact_qpu, tensorboard=False)
    exact = runner.train("reinforce", CFG.__class__(**{**CFG.__dict__, "gradient": "param-shift",
                                                       "backend": "compiled"}), Sync(), tensorboard=False)
    assert twin["returns"] == exact["returns"]
    for k in exact["params"]:
        np.testing.assert_allclose(twin["params"][k].numpy(), exact["params"][k].numpy(), atol=1e-9)
    assert twin["usage"]["circuits"] == twin["env_steps_taken"]  # each env step one circuit, the learner none
    assert runner.circuits_per_env_step("reinforce", CFG)[0] == 1


def test_the_learner_sees_the_qpus_values_as_acted_and_runs_no_circuit():
    """With shots, the QPU's values differ from the twin's: the learner's log-probabilities at the parameters that
    acted are the QPU's (the offsets), and its circuits all run on the twin (no job)."""
    cfg = reinforce.resolve(reinforce.Config(n_layers=1, batch_episodes=2, seed=1, shots=50, gradient="twin",
                                             backend="reference", dtype="float64"), in_process=False)
    policy = reinforce.make_policy(cfg)
    seen = []
    batch, _ = reinforce.act(policy, reinforce.make_envs(cfg), cfg, 0, reinforce.init_carry(cfg))
    assert batch.offsets.shape == (batch.n_steps, 1) and np.abs(batch.offsets).max() > 0  # shot noise
    states = torch.from_numpy(batch.states)
    policy.job_backend().submit = lambda b: seen.append(b)  # no job may reach the QPU while learning
    with learning_on_twin(policy):
        logp = policy.log_probs(states, batch.offsets)
        twin_only = policy.log_probs(states)
    assert not seen
    with torch.no_grad():
        twin_values = policy.twin_values(policy.angles(states))
        qpu_values = twin_values + torch.from_numpy(batch.offsets)  # what the QPU measured: 50 shots of ±1
        np.testing.assert_allclose(logp.numpy(), torch.log_softmax(policy.readout(qpu_values), -1).numpy(), atol=1e-12)
    counts = (qpu_values.numpy() + 1) * 50 / 2
    np.testing.assert_allclose(counts, np.round(counts), atol=1e-9)  # (the twin's exact values are not)
    assert not torch.allclose(logp, twin_only)
    logp.gather(1, torch.from_numpy(batch.actions)[:, None]).sum().backward()
    assert policy.weights.grad is not None and policy.weights.grad.abs().sum() > 0


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_ppo_and_dqn_twins_act_on_the_qpu_and_learn_on_the_twin(algo):
    mod = {"ppo": ppo, "dqn": dqn}[algo]
    extra = {"ppo": {"num_envs": 2, "num_steps": 8, "max_episodes": 2},
             "dqn": {"max_episodes": 2, "batch_size": 4, "train_every": 2}}[algo]
    cfg = mod.Config(n_layers=1, seed=3, backend="qpu", gradient="twin", shots=100, stop_when_solved=False, **extra)
    out = runner.train(algo, cfg, Sync(), backends=QPU, tensorboard=False)
    assert out["usage"]["circuits"] <= out["env_steps_taken"] + 2 * 8  # a circuit per step (ppo: + the last values)
    assert runner.circuits_per_env_step(algo, cfg)[0] == 1


def test_twin_noise_goes_with_the_twin():
    with pytest.raises(ValueError, match="twin_noise goes with gradient twin"):
        reinforce.Config(twin_noise="ionq.qpu.aria-1")


def test_a_twin_run_stopped_by_its_budget_and_resumed_ends_as_one_never_stopped(tmp_path):
    cfg = CFG.__class__(**{**CFG.__dict__, "shots": 200, "max_episodes": 12})

    def train(run_dir, **kw):
        return runner.train("reinforce", cfg, Pipelined(staleness=1), run_dir=run_dir, backends=QPU,
                            tensorboard=False, checkpoint_every=1, **kw)

    whole = train(tmp_path / "whole")
    with pytest.raises(hq.RunFailed, match="budget reached"):
        train(tmp_path / "cut", budget=0.4 * whole["spend"])
    resumed = runner.train("reinforce", resume=True, run_dir=tmp_path / "cut", backends=QPU, tensorboard=False,
                           budget=10 * whole["spend"])
    assert resumed["returns"] == whole["returns"]
    assert all(torch.equal(resumed["params"][k], whole["params"][k]) for k in whole["params"])
    rows = [(tmp_path / d / "metrics.jsonl").read_text().splitlines() for d in ("whole", "cut")]
    strip = [[{k: v for k, v in json.loads(line).items() if k != "seconds"} for line in r] for r in rows]
    assert strip[0] == strip[1]

