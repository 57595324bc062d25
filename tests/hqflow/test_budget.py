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
    with pytest.raises(hq.RunFailed, match=r"budget reached: spent 6\.0000 USD of 7\.0000") as info:
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
