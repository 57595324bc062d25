"""A run's budget: jobs are priced before they are submitted, a job past the budget is refused
with a clear error, completed results are kept, and spend shows in the stats and the spans."""
import numpy as np
import pytest

import hqflow as hq
from hqflow.backends import CircuitBatch
from hqflow.backends.azure.cost import Cost
from hqflow.backends.reference import ReferenceBackend
from hqflow.ir import Circuit


def _template():
    c = Circuit(1, name="coin")
    x = c.inputs("x", 1)
    c.ry(x[0], 0)
    return c.build(observables=["Z0"])


TEMPLATE = _template()


class Priced(ReferenceBackend):
    """The reference simulator at a price: ``per_row`` per row; reports a lower actual cost."""

    name = "priced"

    def __init__(self, per_row=1.0, actual=None, currency="USD"):
        super().__init__()
        self.per_row, self.actual, self.currency, self.submitted = per_row, actual, currency, 0

    def estimate_cost(self, batch):
        return Cost(self.per_row * batch.size, self.currency, batch.size, batch.shots or 0)

    def run(self, batch):
        self.submitted += 1
        res = super().run(batch)
        if self.actual is not None:
            res.metadata["cost"] = self.actual * batch.size
        return res


def actor(step):
    batch = CircuitBatch.make(TEMPLATE, np.full((2, 1), 0.1 * step))
    return {"y": float(hq.get_client().submit("qpu", batch).result().values.sum())}


def _graph():
    pipe = hq.Pipeline("budgeted")
    pipe.input("step", "scalar")
    pipe.preprocess(actor, outputs={"y": "scalar"}, job_backends=("qpu",), name="actor")
    pipe.output("actor.y")
    return pipe.build()


def test_a_job_past_the_budget_is_refused_and_results_are_kept():
    backend = Priced(per_row=1.0)
    with pytest.raises(hq.RunFailed, match=r"budget reached: spent 6\.00 USD of 7\.00 USD") as info:
        hq.run(_graph(), [{"step": i} for i in range(10)], backends={"qpu": backend}, executor="sync", budget=7.0)
    exc = info.value
    partial = exc.result
    assert len(partial.outputs) == 3 and backend.submitted == 3  # 3 jobs of 2 rows; the 4th would pass 7
    assert partial.extra["spend"] == 6.0 <= partial.extra["budget"]
    priced = [s for s in partial.spans if s.kind == "execute"]
    assert [s.cost for s in priced] == [2.0, 2.0, 2.0]
    assert partial.extra["refused_jobs"] == 1


def test_actual_cost_replaces_the_estimate_and_no_budget_means_no_refusal():
    backend = Priced(per_row=1.0, actual=0.25)
    result = hq.run(_graph(), [{"step": i} for i in range(4)], backends={"qpu": backend}, executor="local")
    assert result.extra["spend"] == pytest.approx(4 * 2 * 0.25) and result.extra["currency"] == "USD"
    assert result.extra["budget"] is None


def test_free_backends_are_not_priced_and_bad_budgets_are_refused():
    result = hq.run(_graph(), [{"step": 0}], backends={"qpu": ReferenceBackend()}, executor="sync", budget=0.0)
    assert result.extra["spend"] == 0.0 and all(s.cost is None for s in result.spans)
    for bad in (-1, "ten", True):
        with pytest.raises(ValueError, match="budget must be a number"):
            hq.SchedulerConfig(budget=bad)


def shot_actor(step):
    batch = CircuitBatch.make(TEMPLATE, np.full((2, 1), 0.1 * step), shots=100, seed=step)
    return {"y": float(hq.get_client().submit("qpu", batch).result().values.sum())}


def _shot_graph(fn=shot_actor):
    pipe = hq.Pipeline("shot-budgeted")
    pipe.input("step", "scalar")
    pipe.preprocess(fn, outputs={"y": "scalar"}, job_backends=("qpu",), name="actor")
    pipe.output("actor.y")
    return pipe.build()


class Sampling(ReferenceBackend):
    """The reference simulator, counting its jobs; ``reported``: the shots per circuit its results say."""

    name = "sampling"

    def __init__(self, reported=None):
        super().__init__()
        self.reported, self.submitted = reported, 0

    def run(self, batch):
        self.submitted += 1
        res = super().run(batch)
        if self.reported is not None:
            res.metadata["shots"] = self.reported
        return res


@pytest.mark.parametrize("executor", ["sync", "local"])
def test_a_shot_budget_for_half_the_jobs_stops_the_run_with_that_half_kept(executor):
    backend = Sampling()  # 10 steps, one job of 2 rows x 100 shots each; the budget takes 5 of them
    with pytest.raises(hq.RunFailed, match=r"shot budget reached: 1,000 of 1,000 shots spent; the next job "
                                           r"on sampling would take 200") as info:
        hq.run(_shot_graph(), [{"step": i} for i in range(10)], backends={"qpu": backend}, executor=executor,
               shot_budget=1000)
    partial = info.value.result
    assert len(partial.outputs) == 5 and backend.submitted == 5
    assert partial.extra["shot_spend"] == 1000 == partial.extra["shot_budget"]
    assert partial.extra["shots"] == 1000 and partial.extra["refused_jobs"] == 1


def test_reported_shots_replace_the_estimate_and_exact_runs_are_never_refused():
    backend = Sampling(reported=25)  # each job says it took 25 shots a circuit, not the 100 asked for
    result = hq.run(_shot_graph(), [{"step": i} for i in range(4)], backends={"qpu": backend}, executor="sync",
                    shot_budget=350)  # each job is charged 200 before it runs, then the 50 it took
    assert len(result.outputs) == 4 and result.extra["shot_spend"] == 4 * 50 == result.extra["shots"]
    exact = hq.run(_graph(), [{"step": i} for i in range(4)], backends={"qpu": ReferenceBackend()}, executor="sync",
                   shot_budget=0)
    assert len(exact.outputs) == 4 and exact.extra["shot_spend"] == 0 and exact.extra["refused_jobs"] == 0


def test_bad_shot_budgets_are_refused_in_one_line():
    for bad in (-1, 1.5, "ten", True):
        with pytest.raises(ValueError, match=r"^shot_budget must be an integer >= 0 or None, got .*$"):
            hq.SchedulerConfig(shot_budget=bad)
    assert hq.SchedulerConfig(shot_budget=10).shot_budget == 10


@pytest.mark.ray
def test_a_shot_budget_holds_for_jobs_submitted_in_ray_workers():
    """Workers' job services charge the run's ledger actor (``RemoteLedger``)."""
    with pytest.raises(hq.RunFailed, match=r"shot budget reached: 600 of 700 shots spent") as info:
        hq.run(_shot_graph(), [{"step": i} for i in range(6)], backends={"qpu": "reference"}, executor="ray",
               ray_num_cpus=2, shot_budget=700)
    partial = info.value.result
    assert len(partial.outputs) == 3 and partial.extra["shot_spend"] == 600 and partial.extra["refused_jobs"] == 1


@pytest.mark.ray
def test_a_ray_ledger_is_settled_without_waiting_and_closing_waits_for_the_settles(monkeypatch):
    """A job's end sends its settle to the ledger actor and goes on (it waited for a round trip, and the first one
    for the actor's process to start: a second in each Ray run); ``close`` waits for this process's settles, and
    the figures count every one, in order after this process's charges."""
    import pickle

    from hqflow.backends import Usage
    from hqflow.common import remote
    from hqflow.jobs.ledger import RemoteLedger

    waited = []

    def get(ref, timeout=None):
        waited.append(ref)
        return real(ref, timeout)

    real = remote.get
    monkeypatch.setattr(remote, "get", get)  # every call that waits for the actor's answer
    ledger = RemoteLedger(10.0)
    assert ledger.charge(4.0, "USD", "a") is None and len(waited) == 1
    for _ in range(3):
        ledger.settle(Usage(1, 2, 0, 1.0, "USD"), -1.0)
    assert len(waited) == 1  # none of the settles waited
    copy = pickle.loads(pickle.dumps(ledger))  # as a Ray worker gets it
    copy.settle(Usage(1, 2, 0, 1.0, "USD"), -1.0)
    copy.close()
    ledger.close()
    assert len(waited) == 3  # one call each after the settles, at close
    figures = ledger.figures()
    assert figures["spend"] == 0.0 and figures["paid"]["service_jobs"] == 4 and figures["paid"]["circuits"] == 8
    ledger.stop()


def test_the_ledger_is_written_ahead_and_a_ledger_on_its_file_goes_on_from_its_totals(tmp_path):
    """34.29: a resumed run knows what a killed one paid: every charge is on file before its job is submitted (a
    job in flight at the kill counts at its estimate), every ended job's usage too; a line a kill cut short is
    dropped, and what follows it starts a line of its own."""
    from hqflow.backends import Usage
    from hqflow.jobs.ledger import Ledger

    path = tmp_path / "ledger.jsonl"
    first = Ledger(10.0, path=path)
    assert first.charge(4.0, "USD", "a") is None and first.charge(3.0, "USD", "b") is None  # two jobs submitted
    first.settle(Usage(1, 2, 200, 3.5, "USD"), spend=-0.5, shots=200)  # one ended; the process dies with the other
    with open(path, "a") as fh:
        fh.write('{"spend": 9.0, "sh')  # the kill cuts a line short: that job was never submitted
    second = Ledger(10.0, path=path)
    assert (second.spend, second.shots, second.currency) == (6.5, 200, "USD")
    assert second.paid == Usage(1, 2, 200, 3.5, "USD") and second.figures()["spend_before"] == 6.5
    assert "budget reached: spent 6.50 USD of 10.00 USD" in second.charge(4.0, "USD", "c")  # 6.50 + 4 > 10
    assert second.charge(3.5, "USD", "d") is None
    second.close()
    assert Ledger(path=path).spend == 10.0  # the line after the torn one was kept
