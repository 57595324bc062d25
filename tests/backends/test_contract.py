"""The backend contract (issue 24): a backend written from ``hqflow.backends.Backend``'s docstring alone runs
wherever a built-in one does: ``hq.run`` (sync and local), a pool of two, a budget, ``QuantumLayer``, ``hqflow
train --backend`` through a registered factory, and Ray. Twice: as a ``Backend`` subclass, and as a plain object
that hqflow wraps once. And the runtime asks a backend nothing by ``hasattr``/``getattr``."""
import ast
import concurrent.futures as cf
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

import hqflow as hq
import hqflow.backends as registry
from hqflow.backends import Backend, BackendError, Capabilities, Cost, FutureJob, get_backend, register_backend
from hqflow.ir import Circuit
from hqflow.torch import QuantumLayer, differentiates
from hqflow.workloads import synthetic

MADE: list = []  # every backend the factories below made in this process


class Mine(Backend):
    """Written from the docstring: name, capabilities, submit -> Job; max_in_flight and close overridden."""

    def __init__(self, name: str = "mine", max_in_flight: int = 2):
        self.name, self.max_in_flight = name, max_in_flight
        self.capabilities = Capabilities(name, max_qubits=8)
        self.jobs, self.closed = 0, 0
        self._sim = get_backend("reference")  # the arithmetic; the protocol is this class's own
        self._pool, self._lock = None, threading.Lock()
        MADE.append(self)

    def submit(self, batch):
        with self._lock:
            if self._pool is None:
                self._pool = cf.ThreadPoolExecutor(self.max_in_flight)
            self.jobs += 1
            return FutureJob(self._pool.submit(self._sim.run_checked, batch), self.name)

    def close(self):
        with self._lock:
            self.closed += 1
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None


class PricedMine(Mine):
    """Priced by defining estimate_cost (the docstring's rule): one USD a row."""

    def estimate_cost(self, batch):
        return Cost(1.0 * batch.size, "USD", batch.size, 0)


class Differentiable(Mine):
    """gradient="autograd" declares program(): the compiled backend's torch program, in process."""

    def __init__(self, name: str = "differentiable"):
        super().__init__(name)
        self.capabilities = Capabilities(name, max_qubits=8, gradient="autograd")
        self.programs = 0

    def program(self, template, dtype=None):
        self.programs += 1
        return get_backend("compiled").program(template, dtype=dtype)


class _DuckJob:
    """done, result and cancel only: no started(), no add_done_callback()."""

    def __init__(self, future):
        self.future = future

    def done(self):
        return self.future.done()

    def result(self, timeout=None):
        return self.future.result(timeout)

    def cancel(self):
        return self.future.cancel()


class Duck:
    """No base class at all: name, capabilities and submit."""

    def __init__(self, name: str = "duck", gradient=None):
        self.name, self.capabilities = name, Capabilities(name, max_qubits=8, gradient=gradient)
        self.jobs, self._sim, self._pool = 0, get_backend("reference"), cf.ThreadPoolExecutor(1)
        MADE.append(self)

    def submit(self, batch):
        self.jobs += 1
        return _DuckJob(self._pool.submit(self._sim.run_checked, batch))


KINDS = [Mine, Duck]


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_SUFFIX", dict(registry._SUFFIX))
    monkeypatch.setattr(registry, "_LISTED", list(registry._LISTED))
    register_backend("mine", Mine, listed=False)
    register_backend("duck", Duck, listed=False)
    MADE.clear()
    yield
    MADE.clear()


def _run(backends, executor="sync", steps=4, **options):
    cfg = synthetic.Config(staleness=0, backend="qpu")
    return hq.run(synthetic.build_graph(cfg), synthetic.stream(steps, cfg), backends=backends, executor=executor,
                  **options)


def _same(res, ref):
    assert res.outputs == ref.outputs  # floats compared exactly: the same arithmetic, nothing lost or doubled
    np.testing.assert_array_equal(res.state["learn.weights"], ref.state["learn.weights"])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("executor", ["sync", "local"])
def test_hq_run(kind, executor):
    backend = kind()
    _same(_run({"qpu": backend}, executor), _run({"qpu": "reference"}, executor))
    assert backend.jobs > 0
    assert not getattr(backend, "closed", 0)  # a caller's instance is the caller's to close


@pytest.mark.parametrize("kind", KINDS)
def test_a_pool_of_two(kind):
    a, b = kind(name="a"), kind(name="b")
    res = _run({"qpu": [a, b]}, "local", steps=6)
    _same(res, _run({"qpu": "reference"}, "local", steps=6))
    assert {s.row.name for s in res.spans if s.kind == "execute"} == {"a", "b"} and a.jobs and b.jobs


def test_a_priced_backend_is_held_to_the_budget_and_an_unpriced_one_is_free():
    backend = PricedMine()
    assert backend.priced and not Mine().priced
    with pytest.raises(hq.RunFailed, match="budget reached"):
        _run({"qpu": backend}, budget=float(synthetic.Config().batch) * 2.5)
    free = _run({"qpu": Duck()}, budget=0.0)
    assert free.extra["spend"] == 0.0


def test_the_defaults_of_the_base_classes():
    mine, duck = Mine(), registry.as_backend(Duck())
    assert mine.max_in_flight == 2 and duck.max_in_flight is None and not duck.priced
    with pytest.raises(BackendError, match="does not price its jobs"):
        duck.estimate_cost(None)
    with pytest.raises(BackendError, match="has no torch program"):
        mine.program(None)
    duck.close()  # nothing to close: the default does nothing
    assert registry.as_backend(mine) is mine and registry.as_backend(duck) is duck
    with pytest.raises(TypeError, match="is not a backend: it has no 'capabilities'"):
        registry.as_backend(type("Half", (), {"name": "half", "submit": lambda self, b: None})())


def _template():
    c = Circuit(2, name="layer")
    x, w = c.inputs("x", 2), c.weights("w", 3)
    c.ry(x[0], 0).rx(x[1], 1).cx(0, 1).rz(w[0], 1).ry(w[1], 0).rx(w[2], 1)
    return c.build(observables=["Z0", "X1 Z0"])


def _layer_run(backend):
    layer = QuantumLayer(_template(), backend, seed=0, dtype=torch.float64)
    x = torch.tensor(np.random.default_rng(0).uniform(-np.pi, np.pi, (3, 2)), requires_grad=True)
    out = layer(x)
    (out * torch.tensor([[0.7, -1.3]], dtype=out.dtype)).sum().backward()
    return out.detach().numpy(), x.grad.numpy(), layer.weights.grad.numpy(), layer


@pytest.mark.parametrize("kind", KINDS)
def test_quantum_layer(kind):
    backend = kind()
    out, gx, gw, layer = _layer_run(backend)
    ref = _layer_run("reference")
    for mine, theirs in zip((out, gx, gw), ref[:3]):
        np.testing.assert_array_equal(mine, theirs)  # the same jobs: values and parameter-shift gradients
    assert backend.jobs == 2 and f"backend={backend.name!r}" in repr(layer)  # a forward job and a shift job


def test_the_differentiable_program_is_declared_by_the_capability():
    backend = Differentiable()
    out, gx, gw, _ = _layer_run(backend)
    ref = _layer_run("compiled")
    for mine, theirs in zip((out, gx, gw), ref[:3]):
        np.testing.assert_allclose(mine, theirs, atol=1e-12)
    assert differentiates(backend) and backend.programs == 1 and backend.jobs == 0  # in process: no jobs
    claims = Duck(gradient="autograd")  # says autograd but has no program: parameter shift through jobs
    assert not differentiates(claims) and registry.as_backend(claims).capabilities.gradient is None
    _layer_run(claims)
    assert claims.jobs == 2


@pytest.mark.parametrize("name", ["mine", "duck"])
@pytest.mark.parametrize("pool", [[], ["--pool", "2"]])
def test_hqflow_train_through_a_registered_factory(registered, tmp_path, name, pool):
    from hqflow.cli import main

    run = tmp_path / "run"
    assert main(["train", "cartpole", "--backend", name, *pool, "--set", "n_layers=1", "--set", "batch_episodes=2",
                 "--episodes", "4", "--no-tensorboard", "--run-dir", str(run)]) == 0
    assert (run / "checkpoint.pt").exists()
    made = [b for b in MADE if type(b).__name__.lower() == name]
    assert sum(b.jobs for b in made) > 0  # the policy's circuits ran on the registered backend
    assert len(made) == (2 if pool else 1)  # resolved once: the pool's members, made once, and none to ask
    if name == "mine":
        assert all(b.closed > 0 for b in made)  # closed when the run ended


@pytest.mark.ray
def test_ray(registered, tmp_path):
    pytest.importorskip("ray")
    res = _run({"qpu": [("mine", {}), ("duck", {})]}, "ray", steps=6, ray_num_cpus=2)
    _same(res, _run({"qpu": "reference"}, steps=6))
    assert {s.row.name for s in res.spans if s.kind == "execute"} == {"mine", "duck"}
    from hqflow.cli import main

    assert main(["train", "cartpole", "--backend", "mine", "--distribution", "ray-actors", "--set", "n_layers=1",
                 "--set", "batch_episodes=2", "--episodes", "4", "--no-tensorboard",
                 "--run-dir", str(tmp_path / "run")]) == 0


def test_the_runtime_never_probes_a_backend():
    """No hasattr/getattr(x, member...) of a protocol member in hqflow/ or workloads/: the base classes declare
    them (``as_backend`` in backends/ is the one place that asks an object what it has)."""
    members = {"submit", "capabilities", "max_in_flight", "estimate_cost", "priced", "program", "close",
               "add_done_callback", "started", "node", "metadata"}
    root, found = Path(__file__).resolve().parents[2], []
    for path in sorted([*root.joinpath("hqflow").rglob("*.py"), *root.joinpath("workloads").rglob("*.py"),
                         *root.joinpath("cli").rglob("*.py")]):
        for call in ast.walk(ast.parse(path.read_text())):
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                    and call.func.id in ("hasattr", "getattr") and len(call.args) >= 2
                    and isinstance(call.args[1], ast.Constant) and call.args[1].value in members):
                found.append(f"{path.relative_to(root)}:{call.lineno} {call.func.id}(..., {call.args[1].value!r})")
    assert not found, found
