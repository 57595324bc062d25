"""``--objective cost``'s closed-form choice (hqflow.workloads.rl.frugal) against small priced backends written here, and the
cost model's predicted usage (service jobs, circuits, shots) against what a real run counts."""
import concurrent.futures as cf
import dataclasses
import math

import numpy as np
import pytest

import hqflow as hq
from hqflow.backends import Backend, BackendError, Capabilities, CircuitBatch, Cost, FutureJob
from hqflow.backends.emulated import EmulatedQPU
from hqflow.planning.costmodel import predict
from hqflow.workloads.rl.frugal import Bounds, choose
from hqflow.ir.circuit import CircuitTemplate
from hqflow.planning.profile import profile
from hqflow.workloads import synthetic

ONE = CircuitBatch.make(CircuitTemplate(1, ()), np.zeros((1, 0)), np.zeros(0))
P = 92  # the default CartPole policy's inputs and weights


class _Priced(Backend):
    """Prices a job of B rows at ``price(shots)`` each; runs nothing."""

    def __init__(self, price=None, service_job_rows=1, max_shots=None):
        self.name, self._price = "priced", price
        self.capabilities = Capabilities("priced", 25, service_job_rows=service_job_rows, max_shots=max_shots)
        self.priced = price is not None

    def submit(self, batch):
        raise NotImplementedError

    def estimate_cost(self, batch):
        shots = batch.shots or 500  # (a cloud target's default)
        return Cost(self._price(shots) * batch.size, "USD", batch.size, shots)


def ionq(g: float, minimum: float = 97.5, **kw) -> _Priced:
    """IonQ's model: per gate-shot prices ``g`` a shot, with a per-job minimum."""
    return _Priced(lambda shots: max(shots * g, minimum), **kw)


def hqc(h: float = 0.01, **kw) -> _Priced:
    """Quantinuum's model: ``5 + shots * h``, rising from the first shot."""
    return _Priced(lambda shots: 5 + shots * h, **kw)


@pytest.mark.parametrize("g", [0.039886, 0.05, 0.0123])
def test_a_per_job_minimum_gives_the_most_shots_that_still_cost_the_minimum(g):
    floor = math.floor(97.5 / g)
    chosen = choose(ionq(g), ONE, P, Bounds(shots=(100, 20_000)))
    assert chosen.shots == floor and "per-job minimum" in chosen.reasons["shots"]
    assert chosen.cost_per_state == pytest.approx(97.5 * (1 + 1 + 2 * P))  # every circuit at the floor
    # a range above the floor: the price rises from its lower bound; below it: all free, the most
    assert choose(ionq(g), ONE, P, Bounds(shots=(floor + 1, 20_000))).shots == floor + 1
    assert choose(ionq(g), ONE, P, Bounds(shots=(10, 100))).shots == 100


def test_the_default_policy_on_an_aria_like_target_gives_2444_shots_for_the_price_of_100():
    assert choose(ionq(0.039886), ONE, P, Bounds(shots=(100, 5000))).shots == 2444


def test_a_price_that_rises_from_the_first_shot_gives_the_lower_bound():
    chosen = choose(hqc(), ONE, P, Bounds(shots=(100, 5000)))
    assert chosen.shots == 100 and "rises" in chosen.reasons["shots"]


def test_a_free_or_unpriced_backend_gives_the_upper_bound_and_max_shots_caps_it():
    assert choose(_Priced(None), ONE, P, Bounds(shots=(100, 5000))).shots == 5000
    assert choose(_Priced(lambda s: 0.0), ONE, P, Bounds(shots=(100, 5000))).shots == 5000
    capped = choose(_Priced(None, max_shots=1000), ONE, P, Bounds(shots=(100, 5000)))
    assert capped.shots == 1000 and "capped" in capped.reasons["shots"]
    assert choose(ionq(0.039886, max_shots=2000), ONE, P, Bounds(shots=(100, 5000))).shots == 2000  # under the floor
    with pytest.raises(ValueError, match="above the most shots priced takes a circuit, 50"):
        choose(_Priced(None, max_shots=50), ONE, P, Bounds(shots=(100, 5000)))


@pytest.mark.parametrize("gradients, k, expected", [
    (("param-shift", "spsa"), (2, 8), ("spsa", 2)),  # 4 circuits against 185
    (("param-shift", "spsa"), (92, 100), ("spsa", 92)),  # 184 < 185
    (("param-shift", "spsa"), (93, 100), ("param-shift", 5)),  # 186 > 185: k stays as configured
    (("param-shift",), (2, 8), ("param-shift", 5)),
    (("spsa",), None, ("spsa", 5)),  # no k range: the configured k
    (("spsa", "param-shift"), None, ("spsa", 5)),
])
def test_the_gradient_with_the_fewest_circuits_per_state(gradients, k, expected):
    chosen = choose(_Priced(None), ONE, P, Bounds(gradients=gradients, spsa_samples=k), spsa_samples=5)
    assert (chosen.gradient, chosen.spsa_samples) == expected
    assert ("unused" in chosen.reasons["spsa_samples"]) == (chosen.gradient == "param-shift")
    rows = 2 * chosen.spsa_samples if chosen.gradient == "spsa" else 1 + 2 * P
    assert chosen.circuits_per_state == 1 + rows  # one to act, the gradient's rows


def test_without_bounds_the_settings_stay_as_configured():
    for backend in (ionq(0.039886), hqc(), _Priced(None)):
        for gradient, shots in (("param-shift", None), ("spsa", 300)):
            chosen = choose(backend, ONE, P, gradient=gradient, shots=shots, spsa_samples=3)
            assert (chosen.gradient, chosen.shots, chosen.spsa_samples) == (gradient, shots, 3)
            assert all("as configured" in chosen.reasons[k] for k in ("gradient", "shots", "spsa_samples"))


def test_the_usage_per_state_and_per_episode():
    backend = ionq(0.039886)
    chosen = choose(backend, ONE, P, Bounds(("param-shift", "spsa"), (100, 5000), (2, 4)),
                    circuits_per_state=lambda rows: 1 + rows)
    assert chosen.settings() == {"gradient": "spsa", "shots": 2444, "spsa_samples": 2, "groups": 1}
    assert (chosen.circuits_per_state, chosen.shots_per_state, chosen.service_jobs_per_state) == (5, 5 * 2444, 5)
    episode = chosen.per_episode(500)
    assert episode["circuits"] == 2500 and episode["service_jobs"] == 2500 and episode["currency"] == "USD"
    assert episode["cost"] == pytest.approx(2500 * 97.5)
    packed = choose(_Priced(None, service_job_rows=16), ONE, P, Bounds(shots=(100, 200)))
    assert packed.service_jobs_per_state == pytest.approx(packed.circuits_per_state / 16)
    assert packed.cost_per_state is None and "up to 16 rows" in packed.reasons["packing"]
    one_per_submit = choose(_Priced(None, service_job_rows=None), ONE, P)
    assert one_per_submit.service_jobs_per_state is None and one_per_submit.per_episode(10)["service_jobs"] is None


@pytest.mark.parametrize("bounds, words", [
    (dict(gradients=("foo",)), "gradients must be some of"),
    (dict(gradients=()), "gradients must be some of"),
    (dict(shots=(0, 10)), "shots must be (lo, hi)"),
    (dict(shots=(10, 5)), "shots must be (lo, hi)"),
    (dict(spsa_samples=(1.5, 2)), "spsa_samples must be (lo, hi)"),
])
def test_bad_bounds_are_one_line_errors(bounds, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        Bounds(**bounds)


class _PerRow(Backend):
    """An emulated QPU whose jobs say they made one service job per row (as a per-circuit cloud target does)."""

    name = "per-row"

    def __init__(self):
        self.inner = EmulatedQPU(per_job=0.0005)
        self.capabilities = dataclasses.replace(self.inner.capabilities, service_job_rows=1)
        self.threads = cf.ThreadPoolExecutor(2)

    def submit(self, batch):
        def run():
            result = self.inner.submit(batch).result()
            result.metadata = dict(result.metadata, service_jobs=batch.size)
            return result
        return FutureJob(self.threads.submit(run), self.name)

    def close(self):
        self.inner.close()
        self.threads.shutdown()


@pytest.mark.parametrize("member", ["emulated", "per-row"])
def test_the_predicted_usage_is_what_a_real_run_counts(member):
    cfg = synthetic.Config(staleness=0, backend="qpu", batch=8, matrix=8, repeats=1, n_qubits=2)
    graph, steps = synthetic.build_graph(cfg), 6
    qpu = EmulatedQPU(per_job=0.0005) if member == "emulated" else _PerRow()
    try:
        # cut 3 + 3 + 2: jobs of several sizes, so that service jobs per job and per row are told apart
        real = hq.run(graph, synthetic.stream(steps, cfg), backends={"qpu": qpu}, rows_per_job=3)
    finally:
        qpu.close()
    measured = profile(real.spans)
    for cut in (3, None):
        guess = predict(graph, steps, measured, hq.SchedulerConfig(executor="local", rows_per_job=cut), rows=cfg.batch)
        jobs = steps * (3 if cut else 1)
        assert guess.circuits == real.extra["circuits"] == steps * cfg.batch and guess.shots == 0
        assert guess.service_jobs == (steps * cfg.batch if member == "per-row" else jobs)
    assert real.extra["service_jobs"] == (steps * cfg.batch if member == "per-row" else steps * 3)


def test_a_circuit_the_backend_cannot_price_gets_the_upper_bound_and_says_why():
    class Unpriceable(_Priced):
        def estimate_cost(self, batch):
            raise BackendError("no price for this target")

    chosen = choose(Unpriceable(lambda s: 1.0), ONE, P, Bounds(shots=(100, 300)))
    assert chosen.shots == 300 and "no price for this target" in chosen.reasons["shots"]
    assert chosen.cost_per_state is None
