"""The emulated QPU: correct results, modelled latency, seeded faults, the job API.

Latencies are tens of milliseconds. Lower bounds on durations are exact (the
emulator never delivers early); upper bounds are generous, for loaded machines.
"""
import threading
import time

import numpy as np
import pytest

from hqflow.backends import BackendError, CircuitBatch, Job, JobCancelled, JobFailed, get_backend
from hqflow.backends.emulated import EmulatedQPU, FaultModel, LatencyModel
from hqflow.backends.reference import ReferenceBackend
from hqflow.cli import main
from hqflow.ir import Circuit
from hqflow.ir.random import random_template



@pytest.fixture
def make():
    """``make(**options)``: an EmulatedQPU closed at the end of the test."""
    made = []

    def _make(*args, **kw):
        made.append(EmulatedQPU(*args, **kw))
        return made[-1]

    yield _make
    for qpu in made:
        qpu.close()


def rz_batch(rows=1):
    c = Circuit(1, name="rz")
    c.h(0).gate("rz", [0], c.inputs("x", 1)[0])
    return CircuitBatch.make(c.build(observables=["X0"]), np.linspace(0, 1, rows)[:, None])


def finish_all(jobs, timeout=5.0):
    for job in jobs:
        try:
            job.result(timeout)
        except JobFailed:
            pass


# --- results ------------------------------------------------------------------------


@pytest.mark.parametrize("shots, observables", [(None, True), (None, False), (200, True), (200, False)])
def test_results_equal_the_wrapped_simulator(make, shots, observables):
    rng = np.random.default_rng(7)
    t = random_template(rng, 3)
    t = t if observables else t.with_observables([])
    batch = CircuitBatch.make(t, rng.normal(size=(4, t.n_inputs)), rng.normal(size=t.n_weights),
                              shots=shots, seed=11)
    want = ReferenceBackend().run_checked(batch)
    job = make(per_job=0.01).submit(batch)
    assert isinstance(job, Job)
    got = job.result(timeout=5)
    for field in ("values", "stderr", "probs"):
        a, b = getattr(got, field), getattr(want, field)
        assert (a is None and b is None) or np.array_equal(a, b), field
    assert got.counts == want.counts
    assert got.metadata["backend"] == "emulated-qpu" and got.metadata["simulator"] == "reference"
    assert got.metadata["job"] == 0


def test_wrapping_a_backend_without_run_checked_uses_its_jobs(make):
    inner = make(per_job=0.01)
    outer = make(inner, per_job=0.01)
    batch = rz_batch(3)
    np.testing.assert_array_equal(outer.submit(batch).result(5).values,
                                  ReferenceBackend().run_checked(batch).values)


def test_a_simulator_error_fails_the_job_with_the_cause():
    class Broken:
        name = "broken"
        capabilities = ReferenceBackend().capabilities

        def run_checked(self, batch):
            raise ValueError("boom")

    with EmulatedQPU(Broken()) as qpu:
        with pytest.raises(JobFailed, match="simulator 'broken'.*boom") as info:
            qpu.submit(rz_batch()).result(5)
    assert isinstance(info.value.__cause__, ValueError)


# --- latency -------------------------------------------------------------------------


def test_a_job_takes_its_device_time(make):
    qpu = make(per_job=0.03, per_circuit=0.005, per_shot=0.0)
    t0 = time.perf_counter()
    job = qpu.submit(rz_batch(4))
    assert job.status() in ("queued", "running") and not job.done()
    job.result(timeout=5)
    elapsed = time.perf_counter() - t0
    assert job.status() == "done" and job.device_seconds == pytest.approx(0.05)
    assert job.finished_at - job.started_at >= 0.05
    assert elapsed >= 0.05  # (no upper bound: a busy machine may take longer to wake the job's thread)
    assert job.submitted_at <= job.started_at <= job.finished_at


def test_shots_add_device_time(make):
    batch = CircuitBatch.make(rz_batch(2).template, [[0.1], [0.2]], shots=100)
    job = make(per_shot=1e-4).submit(batch)
    job.result(5)
    assert job.device_seconds == pytest.approx(0.02) and job.finished_at - job.started_at >= 0.02


def test_one_device_slot_runs_jobs_one_after_another(make):
    qpu = make(per_job=0.05, max_in_flight=1)
    a, b = qpu.submit(rz_batch()), qpu.submit(rz_batch())
    finish_all([a, b])
    assert b.started_at >= a.started_at + a.device_seconds - 1e-9  # modelled times: b waits for a's end
    assert b.finished_at - a.submitted_at >= 0.1


def test_two_device_slots_overlap(make):
    qpu = make(per_job=0.2, max_in_flight=2)
    assert qpu.max_in_flight == 2
    a, b = qpu.submit(rz_batch()), qpu.submit(rz_batch())
    finish_all([a, b])
    assert b.started_at < a.finished_at and a.started_at < b.finished_at
    assert min(a.finished_at - a.started_at, b.finished_at - b.started_at) >= 0.2


def test_queue_waits_overlap(make):
    qpu = make(queue_wait=0.1, per_job=0.001)
    jobs = [qpu.submit(rz_batch()) for _ in range(10)]
    finish_all(jobs)
    # every modelled wait is its own 0.1 s (plus the device time of jobs ahead on the one slot), not the
    # sum of the waits before it: one after another, the last would wait 1 s (modelled times: no load counts)
    assert all(0.1 - 1e-9 <= j.started_at - j.submitted_at <= 0.1 + 10 * 0.001 + 1e-9 for j in jobs)


@pytest.mark.parametrize("distribution", ["exponential", "uniform"])
def test_queue_and_jitter_draws_are_seeded(distribution):
    def draws(seed):
        qpu = EmulatedQPU(queue_wait=10.0, per_job=1.0, jitter=0.5, queue_distribution=distribution, seed=seed)
        jobs = [qpu.submit(rz_batch()) for _ in range(50)]
        qpu.close()
        return np.array([[j.queue_seconds, j.device_seconds] for j in jobs])

    a, b, c = draws(1), draws(1), draws(2)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert a.min() >= 0 and len(np.unique(a[:, 0])) == 50
    assert 5 < a[:, 0].mean() < 15  # mean queue_wait 10
    assert a[:, 1].std() > 0.2  # jitter varies the device time


# --- faults --------------------------------------------------------------------------


def failing_indices(seed, n=30, rate=0.3):
    with EmulatedQPU(failure_rate=rate, seed=seed) as qpu:
        jobs = [qpu.submit(rz_batch()) for _ in range(n)]
        finish_all(jobs)
        return [j.index for j in jobs if j.status() == "failed"]


def test_failures_are_seeded():
    first = failing_indices(3)
    assert first and first == failing_indices(3)
    assert first != failing_indices(4)


def test_failure_rate_matches_over_many_jobs():
    n, rate = 200, 0.2
    failed = len(failing_indices(0, n, rate))
    sd = np.sqrt(n * rate * (1 - rate))
    assert abs(failed - n * rate) < 4 * sd


def test_scheduled_failures_take_their_latency(make):
    qpu = make(per_job=0.02, fail_jobs=[1])
    jobs = [qpu.submit(rz_batch()) for _ in range(3)]
    with pytest.raises(JobFailed, match="injected failure: job 1"):
        jobs[1].result(5)
    assert [j.status() for j in jobs[:2]] == ["done", "failed"]
    assert jobs[1].finished_at - jobs[1].started_at >= 0.02
    assert jobs[2].result(5).values.shape == (1, 1)


def test_hanging_job_times_out_until_cancelled(make):
    qpu = make(per_job=0.01, hang_jobs=(0,))
    hung, after = qpu.submit(rz_batch()), qpu.submit(rz_batch())
    assert after.result(5) is not None  # the hung job holds no device slot
    with pytest.raises(TimeoutError, match="job 0 on emulated-qpu not done after 0.05s"):
        hung.result(timeout=0.05)
    assert hung.status() == "queued" and not hung.done() and hung.started_at is None
    assert hung.cancel() and hung.cancel()
    assert hung.status() == "cancelled" and hung.done()
    with pytest.raises(JobCancelled):
        hung.result(0)


def test_timeout_rate_one_hangs_every_job(make):
    qpu = make(timeout_rate=1.0)
    jobs = [qpu.submit(rz_batch()) for _ in range(3)]
    time.sleep(0.05)
    assert not any(j.done() for j in jobs)
    assert all(j.cancel() for j in jobs)


def test_cancel_semantics(make):
    qpu = make(queue_wait=5.0)
    queued = qpu.submit(rz_batch())
    assert queued.cancel() and queued.status() == "cancelled" and queued.finished_at is not None
    with pytest.raises(JobCancelled, match="job 0 on emulated-qpu was cancelled"):
        queued.result(0)

    qpu = make(per_job=0.2)
    running = qpu.submit(rz_batch())
    while running.status() == "queued":
        time.sleep(0.005)
    assert not running.cancel() and running.result(5) is not None
    assert not running.cancel() and running.status() == "done"


def test_done_callbacks_fire_once(make):
    qpu = make(per_job=0.02, fail_jobs=(1,), hang_jobs=(2,))
    seen, lock = [], threading.Lock()

    def record(job):
        with lock:
            seen.append((job.index, job.status()))

    jobs = [qpu.submit(rz_batch()) for _ in range(3)]
    for j in jobs:
        j.add_done_callback(record)
    finish_all(jobs[:2])
    jobs[2].cancel()
    jobs[2].cancel()
    time.sleep(0.02)
    assert sorted(seen) == [(0, "done"), (1, "failed"), (2, "cancelled")]
    jobs[0].add_done_callback(record)  # already finished: called at once
    assert seen[-1] == (0, "done") and len(seen) == 4


def test_a_raising_callback_does_not_break_the_job(make):
    job = make().submit(rz_batch())
    job.add_done_callback(lambda j: 1 / 0)
    assert job.result(5) is not None


def test_close_cancels_unfinished_jobs_and_a_later_submit_starts_afresh():
    qpu = EmulatedQPU(per_job=0.5, hang_jobs=(1,), name="reopened-qpu")
    running, hung = qpu.submit(rz_batch()), qpu.submit(rz_batch())
    qpu.close()
    for job in (running, hung):
        with pytest.raises(JobCancelled):
            job.result(1)
    # a shared instance (one a registered factory hands to several runs) outlives each run's close()
    again = qpu.submit(rz_batch(3))
    assert again.result(5).values.shape == (3, 1)
    qpu.close()
    time.sleep(0.3)  # every generation's threads have stopped
    assert not [t for t in threading.enumerate() if t.name.startswith(f"hqflow-{qpu.name}-")]


# --- arguments, capabilities, registry -----------------------------------------------


@pytest.mark.parametrize("kwargs, arg", [
    ({"per_job": -0.1}, "per_job"),
    ({"queue_wait": float("inf")}, "queue_wait"),
    ({"jitter": float("nan")}, "jitter"),
    ({"failure_rate": 1.5}, "failure_rate"),
    ({"timeout_rate": -0.1}, "timeout_rate"),
    ({"max_in_flight": 0}, "max_in_flight"),
    ({"max_qubits": 0}, "max_qubits"),
    ({"max_circuits_per_job": 2.5}, "max_circuits_per_job"),
    ({"queue_distribution": "normal"}, "queue_distribution"),
    ({"fail_jobs": (-1,)}, "fail_jobs"),
    ({"hang_jobs": 3}, "hang_jobs"),
    ({"latency": LatencyModel(per_job=1.0), "per_job": 0.5}, "latency"),
    ({"faults": {"failure_rate": 0.1}}, "faults"),
    ({"wrapped": ReferenceBackend(), "wrapped_options": {"max_qubits": 3}}, "wrapped_options"),
])
def test_bad_arguments_are_named(kwargs, arg):
    with pytest.raises(BackendError, match=arg):
        EmulatedQPU(**kwargs)


def test_models_can_be_passed_whole(make):
    qpu = make(latency=LatencyModel(per_job=0.02), faults=FaultModel(fail_jobs=(0,)))
    job = qpu.submit(rz_batch())
    with pytest.raises(JobFailed):
        job.result(5)
    assert job.finished_at - job.started_at >= 0.02


def test_capabilities(make):
    caps = make().capabilities
    assert (caps.name, caps.max_qubits, caps.max_circuits_per_job) == ("emulated-qpu", 20, None)
    assert caps.exact and caps.shots and caps.gradient is None and caps.device == "qpu"
    caps = make(name="qpu-a", max_qubits=2, max_circuits_per_job=3, wrapped_options={"max_qubits": 4}).capabilities
    assert (caps.name, caps.max_qubits, caps.max_circuits_per_job) == ("qpu-a", 2, 3)
    assert make(max_qubits=100).capabilities.max_qubits == 20


def test_submit_checks_the_limits_at_once(make):
    qpu = make(max_qubits=1, max_circuits_per_job=2)
    with pytest.raises(BackendError, match="3 circuits exceeds 'emulated-qpu'.s limit of 2"):
        qpu.submit(rz_batch(3))
    with pytest.raises(BackendError, match="has 2 qubits but backend 'emulated-qpu' allows at most 1"):
        qpu.submit(CircuitBatch.make(Circuit(2, name="two").h(0).cx(0, 1).build()))
    assert qpu.submit(rz_batch(2)).result(5).values.shape == (2, 1)


def test_registry_and_cli(capsys):
    qpu = get_backend("emulated-qpu", per_job=0.01, max_in_flight=3)
    assert isinstance(qpu, EmulatedQPU) and qpu.latency.per_job == 0.01 and qpu.max_in_flight == 3
    assert get_backend("emulated-qpu:reference", max_qubits=5).capabilities.max_qubits == 5
    with pytest.raises(BackendError, match="unknown option 'latency_ms' \\(did you mean 'latency'\\?\\)"):
        get_backend("emulated-qpu", latency_ms=3)
    assert main(["backends"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("emulated-qpu"))
    assert "20 qubits" in line and "device=qpu" in line


# --- issue 25: a shot cap, list prices of a real target, row seeds -----------------------------------

def _many_cx(rows):
    c = Circuit(2, name="cx40")
    x = c.inputs("x", 2)
    c.ry(x[0], 0).ry(x[1], 1)
    for _ in range(40):
        c.cx(0, 1)
    return c.build(observables=["Z0"]), np.linspace(0, 1, 2 * rows).reshape(rows, 2)  # N1 = 2, N2 = 40


def test_max_shots_is_declared_and_a_batch_over_it_is_refused(make):
    qpu = make(max_shots=100)
    assert qpu.capabilities.max_shots == 100 and make().capabilities.max_shots is None
    t = rz_batch().template
    with pytest.raises(BackendError) as err:
        qpu.submit(CircuitBatch.make(t, [[0.1]], shots=101))
    assert str(err.value) == "emulated-qpu takes at most 100 shots per job (its max_shots option); got 101"
    assert qpu.submit(CircuitBatch.make(t, [[0.1]], shots=100, seed=0)).result(5).values.shape == (1, 1)
    assert qpu.submit(rz_batch()).result(5).values.shape == (1, 1)  # exact: no shots to cap


def test_price_as_prices_at_the_targets_list_price(make):
    pytest.importorskip("qiskit", reason="prices count gates on the Qiskit circuit")
    from hqflow.backends.azure.cost import price_entry

    aria = price_entry("ionq.qpu.aria-1")
    p1, p2, minimum = aria["price_1q"], aria["price_2q"], aria["minimum"]
    t, x = _many_cx(3)
    qpu = make(price_as="ionq.qpu.aria-1")
    assert qpu.priced and qpu.price_as == "ionq.qpu.aria-1" and qpu.price_shots == 1000
    cost = qpu.estimate_cost(CircuitBatch.make(t, x, shots=5000))
    assert cost.currency == "USD" and cost.jobs == 3  # one circuit per service job on IonQ
    assert cost.amount == pytest.approx(3 * max(5000 * (p1 * 2 + p2 * 40), minimum))
    assert 5000 * (p1 * 2 + p2 * 40) > minimum  # this case is priced per gate, the exact one below at the floor
    exact = CircuitBatch.make(t, x)
    assert qpu.estimate_cost(exact).amount == pytest.approx(3 * max(1000 * (p1 * 2 + p2 * 40), minimum))
    assert make(price_as="azure:ionq.qpu.aria-1", price_shots=3000).estimate_cost(exact).amount == pytest.approx(
        3 * max(3000 * (p1 * 2 + p2 * 40), minimum))
    used = qpu.usage(CircuitBatch.make(t, x, shots=5000))
    assert (used.service_jobs, used.circuits, used.shots) == (1, 3, 15000)  # the emulated QPU's own service job
    assert used.cost == pytest.approx(cost.amount) and used.currency == "USD"


def test_an_emulated_qpu_without_price_as_stays_free(make):
    qpu = make()
    assert not qpu.priced and not EmulatedQPU.priced
    with pytest.raises(BackendError, match="does not price its jobs"):
        qpu.estimate_cost(rz_batch())
    used = qpu.usage(CircuitBatch.make(rz_batch().template, [[0.1], [0.2]], shots=10))
    assert (used.service_jobs, used.circuits, used.shots, used.cost, used.currency) == (1, 2, 20, 0.0, None)


def _budget_run(options):
    import hqflow as hq

    pipe = hq.Pipeline("budget")
    pipe.input("step", "scalar")
    pipe.preprocess(_submit_one, outputs={"value": "array"}, job_backends=("qpu",), name="actor")
    pipe.output("actor.value")
    return hq.run(pipe.build(), [{"step": 0}, {"step": 1}], backends={"qpu": [("emulated-qpu", options)]},
                  executor="sync", budget=1.0)


def _submit_one(step):
    import hqflow as hq

    return {"value": hq.get_client().submit("qpu", rz_batch()).result().values}


def test_a_budget_refuses_only_the_priced_emulated_qpu():
    import hqflow as hq

    assert len(_budget_run({}).outputs) == 2  # free: a budget of 1 USD never refuses it
    with pytest.raises(hq.RunFailed, match="budget"):
        _budget_run({"price_as": "ionq.qpu.aria-1"})  # 97.50 USD a circuit


@pytest.mark.parametrize("price_as, match", [("ionq.qpu.aria-9", "known: .*ionq.qpu.aria-1"),
                                             ("rigetti.qpu.cepheus-1-108q", "not a priced target"),
                                             (3, "not a priced target")])
def test_price_as_an_unknown_target_is_one_line(price_as, match):
    with pytest.raises(BackendError, match=match) as err:
        EmulatedQPU(price_as=price_as)
    assert "\n" not in str(err.value)
    with pytest.raises(BackendError, match="price_shots"):
        EmulatedQPU(price_as="ionq.qpu.aria-1", price_shots=0)


def test_row_seeded_is_the_wrapped_simulators(make):
    from dataclasses import replace

    class Seeded(ReferenceBackend):
        @property
        def capabilities(self):
            return replace(super().capabilities, row_seeded=True)

    assert make(Seeded()).capabilities.row_seeded
    assert make().capabilities.row_seeded == get_backend("reference").capabilities.row_seeded


# --- issue 34: values past what the model can hold are refused at construction ----------------------


@pytest.mark.parametrize("kwargs, message", [
    ({"per_job": 2**70}, "per_job must be a number in [0, 1e+06] seconds, got (an integer of 22 digits)"),
    ({"queue_wait": 2**70}, "queue_wait must be a number in [0, 1e+06] seconds"),
    ({"per_circuit": 2**70}, "per_circuit must be a number in [0, 1e+06] seconds"),
    ({"per_shot": 1e300}, "per_shot must be a number in [0, 1e+06] seconds, got 1e+300"),
    ({"jitter": 10**400}, "jitter must be a number in [0, 10], got (an integer of 401 digits)"),
    ({"max_in_flight": 2**70}, "max_in_flight must be a positive integer up to 1,024"),
    ({"seed": -1}, "seed must be an integer >= 0, got -1"),
    ({"name": float("inf")}, "name must be a non-empty string, got inf"),
    ({"name": ""}, "name must be a non-empty string, got ''"),
    ({"wrapped": 0}, "wrapped must be a backend's name or a backend, got 0"),
    ({"wrapped": float("nan")}, "wrapped must be a backend's name or a backend, got nan"),
])
def test_values_past_the_models_range_are_refused_in_one_line(kwargs, message):
    """Was: an OverflowError in a device slot's thread (and a run that hung), AttributeError or ValueError."""
    with pytest.raises(BackendError) as err:
        EmulatedQPU(**kwargs)
    assert f"emulated-qpu: {message}" in str(err.value)


def test_a_modelled_time_past_what_a_thread_can_wait_is_waited_in_steps():
    """per_shot x shots x rows within range may still pass threading.TIMEOUT_MAX: no wait asks for more."""
    class Closed(threading.Event):  # records the waits, and ends the first
        def wait(self, timeout=None):
            waits.append(timeout)
            return True

    waits = []
    qpu = EmulatedQPU(per_shot=10**6)
    job = qpu._new_job(0, CircuitBatch.make(rz_batch().template, np.zeros((1, 1)), shots=10**7))
    assert job.device_seconds > threading.TIMEOUT_MAX
    job._start(time.perf_counter())
    qpu._execute(job, Closed())
    assert waits and max(waits) <= threading.TIMEOUT_MAX
