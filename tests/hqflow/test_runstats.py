"""hqflow.engine.runstats: the loop's counts, and result.extra's figures in their order."""
from types import SimpleNamespace

import hqflow as hq
from hqflow.backends import get_backend
from hqflow.engine.runstats import RunStats
from hqflow.workloads import synthetic


def test_extra_holds_the_counts_then_the_job_services_figures_the_pools_and_the_bytes_moved():
    stats = RunStats("local")
    for in_flight in (1, 3, 2):
        stats.admitted(in_flight)
    stats.completed = 4
    service = SimpleNamespace(stats={"jobs": 7, "retries": 1, "failed_jobs": 1}, figures=lambda: {"spend": 0.5})
    pools = {"qpu": SimpleNamespace(health=lambda: [{"lane": "qpu:a"}])}
    extra = stats.extra(5, service, pools, {"reduce": 0})
    assert extra == {"max_admitted": 3, "executor": "local", "completed_steps": 4, "steps": 5, "retries": 1,
                     "failed_jobs": 1, "quantum_jobs": 7, "spend": 0.5, "pools": {"qpu": [{"lane": "qpu:a"}]},
                     "bytes_moved": {"reduce": 0}}
    assert list(extra) == ["max_admitted", "executor", "completed_steps", "steps", "retries", "failed_jobs",
                           "quantum_jobs", "spend", "pools", "bytes_moved"]


def test_a_runs_extra_counts_its_steps_and_jobs():
    cfg = synthetic.Config(staleness=0, backend="qpu")
    res = hq.run(synthetic.build_graph(cfg), synthetic.stream(3, cfg), backends={"qpu": get_backend("reference")},
                 executor="sync")
    assert (res.extra["max_admitted"], res.extra["completed_steps"], res.extra["steps"]) == (1, 3, 3)
    assert res.extra["executor"] == "sync" and res.extra["quantum_jobs"] == 3
    assert set(res.extra["pools"]) == {"qpu"}
