"""classifier, vqe and qaoa: SPSA beside parameter shift and shots for the training circuit, as config fields
and as ``hqflow run`` flags (issue 25)."""
import dataclasses
import json
import sys
import types

import numpy as np
import pytest

from hqflow.backends import get_backend
from hqflow.backends.emulated import EmulatedQPU
from hqflow.backends.reference import ReferenceBackend
from hqflow.cli import main
from hqflow.engine.fragments import execute_batch
from hqflow.ir import CircuitCall
from hqflow.workloads import WORKLOADS, classifier, qaoa, vqe

SMALL = {  # a few cheap steps of each
    "classifier": (classifier, {"steps": 3, "samples": 40, "layers": 2, "batch_size": 8}),
    "vqe": (vqe, {"steps": 3}),
    "qaoa": (qaoa, {"steps": 3, "nodes": 4, "layers": 1, "shots": 100}),
}
SHOTS_FIELD = {"classifier": "shots", "vqe": "shots", "qaoa": "cost_shots"}


def _call(graph) -> CircuitCall:
    """The graph's one training ``execute`` fragment."""
    (call,) = [f for f in graph.fragments if isinstance(f, CircuitCall)]
    return call


def _err(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("name", sorted(SMALL))
def test_the_defaults_build_the_graph_as_before(name):
    """Parameter shift, exact values, no SPSA settings: the graph of every existing result."""
    mod, small = SMALL[name]
    cfg = mod.Config(**small)
    assert (cfg.gradient, cfg.spsa_samples, cfg.spsa_epsilon, getattr(cfg, SHOTS_FIELD[name])) == (
        "param-shift", 2, 0.1, None)  # SPSA's 2 directions, as hqflow train's (was 4: issue 34, item 25)
    call = _call(mod.build_graph(cfg))
    assert (call.gradient, call.spsa, call.circuit.shots) == ("param-shift", None, None)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_the_settings_reach_the_training_circuit(name):
    mod, small = SMALL[name]
    cfg = mod.Config(**small, gradient="spsa", spsa_samples=7, spsa_epsilon=0.25, **{SHOTS_FIELD[name]: 300})
    call = _call(mod.build_graph(cfg))
    assert (call.gradient, call.spsa, call.circuit.shots) == ("spsa", (7, 0.25), 300)


@pytest.mark.parametrize("name", sorted(SMALL))
@pytest.mark.parametrize("shots", [None, 200])
def test_a_few_spsa_steps_give_finite_results(name, shots):
    mod, small = SMALL[name]
    cfg = mod.Config(**small, gradient="spsa", spsa_samples=2, **{SHOTS_FIELD[name]: shots})
    out = mod.run(cfg)
    assert len(out["history"]) == cfg.steps and np.all(np.isfinite(out["history"]))
    figures = [v for v in out.values() if isinstance(v, float)]
    assert figures and np.all(np.isfinite(figures))
    assert out["config"]["gradient"] == "spsa" and out["config"][SHOTS_FIELD[name]] == shots


@pytest.mark.parametrize("field, value", [("gradient", "adam"), ("gradient", None), ("spsa_samples", 0),
                                          ("spsa_samples", 1001), ("spsa_samples", 2.0), ("spsa_epsilon", 0.0),
                                          ("spsa_epsilon", 3.3), ("spsa_epsilon", float("nan"))])
@pytest.mark.parametrize("name", sorted(SMALL))
def test_bad_settings_are_refused_naming_the_field(name, field, value):
    mod, _ = SMALL[name]
    with pytest.raises(ValueError, match=field):
        mod.Config(**{field: value})
    with pytest.raises(ValueError, match=SHOTS_FIELD[name]):
        mod.Config(**{SHOTS_FIELD[name]: 0})


def test_spsa_is_close_to_param_shift_on_two_parameters():
    """QAOA at p = 1 (gamma, beta): the mean of many seeds' SPSA jacobians from the workload's own execute
    fragment is within 5 sigma (the seeds' spread) of the parameter-shift jacobian. A small epsilon: SPSA's
    O(epsilon**2) bias (gamma drives 6 gates, so the cut's third derivative is large) stays far below sigma."""
    cfg = qaoa.Config(nodes=4, layers=1, gradient="spsa", spsa_samples=50, spsa_epsilon=0.01)
    spsa_call = _call(qaoa.build_graph(cfg))
    shift_call = _call(qaoa.build_graph(dataclasses.replace(cfg, gradient="param-shift")))
    backend = get_backend("reference")
    args = {"weights": np.array([0.6, 0.2])}

    def jacobian(call, seed):
        batch, post = execute_batch(call, args, seed)
        return post(backend.submit(batch).result()).jacobian[0, 0]

    exact = jacobian(shift_call, 0)
    estimates = np.array([jacobian(spsa_call, seed) for seed in range(40)])
    sigma = estimates.std(axis=0, ddof=1) / np.sqrt(len(estimates))
    assert np.abs(exact).min() > 0.1  # neither component trivially zero
    assert np.all(sigma > 0)  # the estimates vary with the seed
    assert np.all(np.abs(estimates.mean(axis=0) - exact) < 5 * sigma)


def test_spsa_runs_fewer_circuits_a_step():
    """QAOA p = 2 on 6 nodes has 2 x (9 + 6) = 30 shifted angles: 61 circuits a step by parameter shift,
    1 + 2 x 3 with 3 SPSA directions."""
    rows = []

    class Counting(EmulatedQPU):
        def submit(self, batch):
            rows.append(batch.size)
            return super().submit(batch)

    for gradient, expected in (("param-shift", 61), ("spsa", 7)):
        rows.clear()
        cfg = qaoa.Config(nodes=6, layers=2, steps=2, gradient=gradient, spsa_samples=3, backend="mine")
        qaoa.run(cfg, backends={"mine": [Counting(per_job=0.0)]})
        assert rows[:2] == [expected, expected]  # then the final evaluation's


def test_shots_make_the_training_values_estimates():
    """With shots the energies are samples (not the exact ones) and a function of the seed."""
    exact = vqe.run(vqe.Config(steps=2))["history"]
    one = vqe.run(vqe.Config(steps=2, shots=100))["history"]
    assert vqe.run(vqe.Config(steps=2, shots=100))["history"] == one
    assert vqe.run(vqe.Config(steps=2, shots=100, seed=1))["history"] != one
    assert one[0] != exact[0] and abs(one[0] - exact[0]) < 0.5  # 100 shots of a Hamiltonian of norm < 3


class _SamplesOnly(ReferenceBackend):
    """A target without exact values, as a QPU: shots only."""

    def __init__(self):
        super().__init__()
        self._caps = dataclasses.replace(self._caps, name="samples-only", exact=False)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_the_evaluation_measures_with_the_runs_shots_on_a_target_without_exact_values(name):  # 34.21
    """The accuracies, the final energy and the final <C> are measured as the run is: with its shots (and its
    seed: the figures repeat), so a target without exact values evaluates them instead of failing."""
    mod, small = SMALL[name]
    cfg = mod.Config(**small, backend="qpu", **{SHOTS_FIELD[name]: 200})
    runs = [mod.run(cfg, backends={"qpu": [_SamplesOnly()]}) for _ in range(2)]
    figures = [{k: v for k, v in out.items() if isinstance(v, float) and k != "seconds"} for out in runs]
    assert figures[0] and figures[0] == figures[1] and np.all(np.isfinite(list(figures[0].values())))
    with pytest.raises(Exception, match="cannot compute exact values; set shots"):
        mod.run(dataclasses.replace(cfg, **{SHOTS_FIELD[name]: None}), backends={"qpu": [_SamplesOnly()]})


# --- hqflow run ------------------------------------------------------------------------------------------------

def test_run_vqe_with_spsa_and_shots(tmp_path, capsys):
    folder = tmp_path / "run"
    assert main(["run", "vqe", "--steps", "3", "--gradient", "spsa", "--spsa-samples", "3", "--spsa-epsilon",
                 "0.2", "--shots", "200", "--json", "--run-dir", str(folder)]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["workload"] == "vqe" and np.isfinite(figures["energy"])
    config = json.loads((folder / "config.json").read_text())
    assert (config["gradient"], config["spsa_samples"], config["spsa_epsilon"], config["shots"]) == (
        "spsa", 3, 0.2, 200)


@pytest.mark.parametrize("name, field", [("classifier", "shots"), ("vqe", "shots"), ("qaoa", "shots")])
def test_each_flag_sets_the_field_of_its_name(name, field, monkeypatch):
    mod, _ = SMALL[name]
    seen = []
    monkeypatch.setattr(mod, "run", lambda cfg, progress=None, **o: seen.append(cfg) or {"workload": name})
    assert main(["run", name, "--gradient", "spsa", "--spsa-samples", "5", "--spsa-epsilon", "0.3",
                 "--shots", "123"]) == 0
    (cfg,) = seen
    assert (cfg.gradient, cfg.spsa_samples, cfg.spsa_epsilon, getattr(cfg, field)) == ("spsa", 5, 0.3, 123)
    assert main(["run", name]) == 0 and seen[1] == mod.Config()  # no flags: the defaults


@pytest.mark.parametrize("flags, message", [
    (["--gradient", "adam"], "invalid choice: 'adam'"),
    (["--spsa-samples", "0", "--gradient", "spsa"], "expected a positive number of directions, got 0"),
    (["--spsa-samples", "1001", "--gradient", "spsa"], "spsa_samples must be"),
    (["--spsa-epsilon", "0", "--gradient", "spsa"], "expected a number in (0, 3.2], got '0'"),
    (["--spsa-epsilon", "3.5", "--gradient", "spsa"], "expected a number in (0, 3.2], got '3.5'"),
    (["--spsa-samples", "3"], "--spsa-samples goes with --gradient spsa"),
    (["--spsa-epsilon", "0.2", "--gradient", "param-shift"], "--spsa-epsilon goes with --gradient spsa"),
    (["--shots", "0"], "expected a positive number of shots, got 0"),
    (["--shots", "many"], "expected a positive number of shots, got 'many'"),
])
def test_bad_flags_exit_2_with_one_line(flags, message, capsys, monkeypatch):
    monkeypatch.setattr(vqe, "run", lambda *a, **k: pytest.fail("the workload ran after a bad flag"))
    assert main(["run", "vqe", *flags]) == 2
    err = _err(capsys)
    assert err.startswith("hqflow: error:") and message in err


@pytest.mark.parametrize("flag, value", [("--gradient", "spsa"), ("--shots", "10")])
def test_a_workload_without_the_field_refuses_its_flag(flag, value, capsys, monkeypatch):
    @dataclasses.dataclass(frozen=True)
    class Config:
        steps: int = 1

    bare = types.ModuleType("hqflow_test_bare_workload")
    bare.Config = Config
    bare.run = lambda *a, **k: pytest.fail("the workload ran with a flag it has no field for")
    monkeypatch.setitem(sys.modules, bare.__name__, bare)
    monkeypatch.setitem(WORKLOADS, "bare", bare.__name__)
    assert main(["run", "bare", flag, value]) == 2
    assert f"workload 'bare' has no setting for {flag}" in _err(capsys)
