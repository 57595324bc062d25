"""Elastic pools (hqflow.start): backends removed and added while a run goes on; nothing is lost or
run twice, and with exact backends at staleness 0 the result is an undisturbed run's, bit for bit."""
import queue
import threading
import time

import numpy as np
import pytest

import hqflow as hq
from hqflow.backends import BackendError, get_backend
from hqflow.backends.emulated import EmulatedQPU
from hqflow.common.clock import REAL
from hqflow.engine.elastic import Elastic
from hqflow.engine.executors import SyncExecutor
from hqflow.ir.graph import GraphError
from hqflow.engine.window import Window
from hqflow.workloads import synthetic

CFG = synthetic.Config(staleness=0, backend="qpu")
STEPS = 60


def _undisturbed(steps):
    """The sync executor on the exact numpy backend, its pool never changed."""
    return hq.run(synthetic.build_graph(CFG), synthetic.stream(steps, CFG), backends={"qpu": get_backend("reference")},
                  executor="sync")


def slow_double(x):
    time.sleep(0.01)
    return {"y": 2 * x}


def total(y, acc):
    return {"acc": acc + y}


def _worker_graph():
    pipe = hq.Pipeline("workers")
    pipe.input("x", "scalar")
    pipe.preprocess(slow_double, outputs={"y": "scalar"})
    pipe.connect("input.x", "slow_double.x")
    pipe.learn(total, outputs={"acc": "scalar"})
    pipe.connect("slow_double.y", "total.y")
    pipe.loop("total.acc", "total.acc", init=0)
    pipe.output("total.acc")
    return pipe.build()


def _qpu(name, per_job=0.004):
    return EmulatedQPU(per_job=per_job, name=name)


def _spec(name):
    return ("emulated-qpu", {"per_job": 0.1, "name": name})  # on Ray: slow enough that the added ones start in time


def _changes(run, progress_steps, at_remove=15, at_add=30, instances=True):
    """Remove the second QPU after step ``at_remove``, add two after ``at_add``. Returns the watcher
    thread and the steps done when each change had landed (None: the run ended first)."""
    landed = {"removed": None, "added": None}

    def watch():
        while progress_steps[0] < at_remove and not run.done():
            time.sleep(0.002)
        if not run.done():
            run.remove_backend("qpu", 1)
            landed["removed"] = progress_steps[0]
        while progress_steps[0] < at_add and not run.done():
            time.sleep(0.002)
        try:  # (the run can end between the check and the add: then the add is refused, and not landed)
            if not run.done():
                run.add_backend("qpu", _qpu("c") if instances else _spec("c"))
                run.add_backend("qpu", _spec("d"))
                landed["added"] = progress_steps[0]
        except RuntimeError as exc:
            assert "the run has ended" in str(exc)
    t = threading.Thread(target=watch)
    t.start()
    return t, landed


@pytest.mark.parametrize("executor", ["local", "sync", pytest.param("ray", marks=pytest.mark.ray)])
def test_removed_and_added_backends_change_nothing_in_the_result(executor):
    ref = _undisturbed(STEPS)
    done, ray = [0], executor == "ray"
    pool = [_spec("a"), _spec("b")] if ray else [_qpu("a"), _qpu("b")]
    run = hq.start(synthetic.build_graph(CFG), synthetic.stream(STEPS, CFG), backends={"qpu": pool}, executor=executor,
                   progress=lambda n, out: done.__setitem__(0, n), **({"ray_num_cpus": 2} if ray else {}))
    watcher, landed = _changes(run, done, instances=not ray)
    res = run.result(timeout=120)
    watcher.join()
    assert res.outputs == ref.outputs  # every step, exactly once, exactly the values
    np.testing.assert_array_equal(res.state["learn.weights"], ref.state["learn.weights"])
    jobs = [s for s in res.spans if s.kind == "execute" and s.outcome == "ok"]
    assert sorted(s.step for s in jobs) == list(range(STEPS))  # none lost, none run twice
    health = {h["lane"]: h for h in res.extra["pools"]["qpu"]}
    assert landed["removed"] is not None, "the run ended before the removal"  # 45 steps of 40 ms after it
    assert health["qpu:b#1"]["removed"] and not health["qpu:a#0"]["removed"]
    # nothing went to b after it left (at most the one job in flight as it left: staleness 0)
    assert max(s.step for s in jobs if s.lane.at(None) == "qpu:b#1") <= landed["removed"]
    # steps were left once both adds had returned: they joined a live run (on a busy machine a Ray backend's
    # start may outlast the run, and an add to a finished run changes nothing)
    if landed["added"] is not None and landed["added"] < STEPS:
        assert {"qpu:c#2", "qpu:d#3"} <= set(health)
        lanes = {s.lane.at(None) for s in jobs if s.step > landed["added"]}  # the members, without device slots
        assert lanes <= {"qpu:a#0", "qpu:c#2", "qpu:d#3"}  # the pool after the changes ran the rest
        if landed["added"] <= STEPS - 10:  # and, with steps enough left, the added ones took work
            assert {"qpu:c#2", "qpu:d#3"} & lanes


def test_a_removed_backends_jobs_in_flight_are_taken_back_and_rerun():
    """The removed QPU holds a job that would take 30 s: it is cancelled and run on the other at once."""
    ref = _undisturbed(4)
    slow = EmulatedQPU(per_job=30.0, name="slow")
    run = hq.start(synthetic.build_graph(CFG), synthetic.stream(4, CFG), backends={"qpu": [slow]}, executor="local")
    while not slow._live:  # the first job is on the slow QPU
        time.sleep(0.01)
    run.add_backend("qpu", _qpu("fast"))
    assert run.remove_backend("qpu", "slow") == 1
    res = run.result(timeout=60)
    assert res.outputs == ref.outputs and res.seconds < 20
    assert [s.outcome for s in res.spans if s.lane is not None and s.lane.name == "slow"] == ["cancelled"]


def test_bad_changes_are_one_line_errors():
    run = hq.start(synthetic.build_graph(CFG), synthetic.stream(3, CFG), backends={"qpu": [_qpu("a", 0.05)]})
    with pytest.raises(ValueError, match="no backend pool named 'gpu'; pools: qpu"):
        run.add_backend("gpu", _qpu("x"))
    with pytest.raises(ValueError, match="pool 'qpu' has no backend 'zz' in it"):
        run.remove_backend("qpu", "zz")
    with pytest.raises(BackendError, match="pool 'qpu' has no member 7 in it"):
        run.remove_backend("qpu", 7)
    run.result(timeout=60)
    with pytest.raises(RuntimeError, match="the run has ended"):
        run.add_backend("qpu", _qpu("late"))


def test_a_planned_run_replans_when_its_pool_changes_and_keeps_its_result():
    from hqflow.common.lanes import Lane
    from hqflow.planning.profile import BackendProfile, FragmentProfile, Profile

    cfg = synthetic.Config(staleness=0, backend="qpu", batch=12)
    graph, stream = synthetic.build_graph(cfg), synthetic.stream(40, cfg)
    prof = Profile((BackendProfile(Lane("qpu", "a"), Lane("qpu", "qpu"), 0.0, 0.001, 0.001, 0.0, 0.0, None, jobs=10),),
                   (FragmentProfile("learn", "cpu", 0.001, 0.0, 10),))
    chosen = hq.plan(graph, 40, prof, rows=12)
    assert chosen.config.rows_per_job is None  # one QPU: nothing to cut over
    done = [0]
    run = hq.start(graph, stream, backends={"qpu": [EmulatedQPU(per_job=0.001, per_circuit=0.001, name="a")]},
                   plan=chosen, progress=lambda n, out: done.__setitem__(0, n))
    while done[0] < 5 and not run.done():
        time.sleep(0.002)
    for name in ("b", "c"):
        run.add_backend("qpu", EmulatedQPU(per_job=0.001, per_circuit=0.001, name=name))
    res = run.result(timeout=60)
    # three QPUs like a: the re-plan cuts a step's 12 rows over them, which changes no value
    assert [p.config.rows_per_job for p in run.plans] == [None, 6, 4]
    assert dict(run.plans[-1].members)["qpu"] == ("qpu:a", "qpu:b#1", "qpu:c#2")
    ref = hq.run(graph, stream, backends={"qpu": get_backend("reference")})
    assert res.outputs == ref.outputs
    assert {s.rows for s in res.spans if s.kind == "execute" and s.step >= 30} == {4}


def test_classical_workers_added_and_removed_mid_run_change_nothing():
    stream = [{"x": k} for k in range(60)]
    done = [0]
    run = hq.start(_worker_graph(), stream, cpu_workers=1, progress=lambda n, out: done.__setitem__(0, n))
    while done[0] < 10 and not run.done():
        time.sleep(0.002)
    run.set_workers("cpu", 3)
    while done[0] < 40 and not run.done():
        time.sleep(0.002)
    run.set_workers("cpu", 1)
    res = run.result(timeout=60)
    assert [o["acc"] for o in res.outputs] == [k * (k + 1) for k in range(60)]  # 2 * (0 + 1 + ... + k)
    lanes = {s.lane for s in res.spans if s.fragment == "slow_double"}
    assert {"cpu/1", "cpu/2"} <= lanes  # the added slots took work
    late = [s for s in res.spans if s.fragment == "slow_double" and s.start > max(
        x.end for x in res.spans if x.fragment == "slow_double" and x.step == 45)]
    assert all(s.lane == "cpu/0" for s in late)  # and after the removal, only the one left
    short = hq.start(_worker_graph(), stream[:2])
    with pytest.raises(ValueError, match="workers must be an integer >= 1"):
        short.set_workers("cpu", 0)
    short.result()
    sync = hq.start(_worker_graph(), stream[:2], executor="sync")
    with pytest.raises(ValueError, match="under the local executor only"):
        sync.set_workers("cpu", 2)
    sync.result()



# -- the Elastic component by itself: pools from specs, changes given to the job service -------------
class _Service:
    """Stands in for the run's JobService: records what the component asks of it."""

    def __init__(self, pools):
        self.pools, self.calls = pools, []

    def add_backend(self, pool, member):
        self.pools[pool].members.append(member)
        self.calls.append(("add", pool, str(member.lane), member.devices, member.capacity))
        return len(self.pools[pool].members) - 1

    def remove_backend(self, pool, index):
        self.calls.append(("remove", pool, index))
        return 0

    def tune(self, prefetch, rows_per_job):
        self.calls.append(("tune", prefetch, rows_per_job))


def _elastic(backends, made=None, backend="qpu", **config):
    cfg = hq.SchedulerConfig(**config)
    graph = synthetic.build_graph(synthetic.Config(staleness=0, backend=backend))
    return Elastic(graph, backends, made or SyncExecutor(), cfg, REAL.now)


def _attached(elastic, **window):
    service, events = _Service(elastic.pools), queue.Queue()
    elastic.attach(service, Window(hq.SchedulerConfig(window=window.get("size")), elastic.pools), events)
    return service, events


def test_pools_are_made_once_from_specs_with_lanes_and_capacities():
    one = _elastic({"qpu": _qpu("solo")}, prefetch=2)
    (member,) = one.pools["qpu"].members
    assert str(member.lane) == "qpu:solo" and (member.devices, member.capacity) == (1, 3)  # the only one: no index
    many = _elastic({"qpu": [_qpu("a"), EmulatedQPU(name="b", max_in_flight=4)]}, prefetch=0)
    assert [(str(m.lane), m.devices, m.capacity) for m in many.pools["qpu"].members] == \
        [("qpu:a#0", 1, 1), ("qpu:b#1", 4, 4)]
    assert list(_elastic({}, backend="reference").pools) == ["reference"]  # a registered backend's name
    with pytest.raises(GraphError, match="backend pool 'qpu' is empty"):
        _elastic({"qpu": []})
    with pytest.raises(GraphError, match="backend 'qpu' is neither a registered backend"):
        _elastic({})


def test_a_joining_backend_gets_the_next_index_the_prefetch_in_force_and_grows_the_window():
    elastic = _elastic({"qpu": [_qpu("a"), _qpu("b")]}, prefetch=1)
    service, _ = _attached(elastic)
    assert elastic.window.size == 10  # 2 * (2 + 2) + 2
    elastic.tune(prefetch=3)
    assert elastic.add_backend("qpu", _qpu("c")) == 2
    assert service.calls == [("tune", 3, "keep"), ("add", "qpu", "qpu:c#2", 1, 4)]
    assert elastic.window.size == 2 * (2 + 2 + 4) + 2  # the members before keep their capacity (the service's)
    with pytest.raises(ValueError, match="prefetch must be an integer >= 0, got -1"):
        elastic.tune(prefetch=-1)
    with pytest.raises(ValueError, match="no backend pool named 'gpu'; pools: qpu"):
        elastic.add_backend("gpu", _qpu("x"))


def test_a_backend_leaves_by_index_or_by_name():
    elastic = _elastic({"qpu": [_qpu("a"), _qpu("b"), _qpu("b")]})
    service, _ = _attached(elastic)
    elastic.remove_backend("qpu", "b")
    elastic.pools["qpu"].members[1].removed = True  # (the service marks it)
    elastic.remove_backend("qpu", "qpu:b#2")
    elastic.remove_backend("qpu", 0)
    assert service.calls == [("remove", "qpu", 1), ("remove", "qpu", 2), ("remove", "qpu", 0)]
    with pytest.raises(ValueError, match="pool 'qpu' has no backend 'zz' in it"):
        elastic.remove_backend("qpu", "zz")


def test_worker_slots_change_under_the_local_executor_only_and_wake_the_loop():
    from hqflow.engine.events import Wake
    from hqflow.engine.executors import LocalExecutor

    executor = LocalExecutor(2, 2)
    try:
        elastic = _elastic({"qpu": _qpu("a")}, made=executor, cpu_workers=2, gpu_workers=2, learners=2)
        _, events = _attached(elastic)
        elastic.set_workers("cpu", 3)
        assert elastic.slots == {"cpu": 3, "gpu": 2} and isinstance(events.get_nowait(), Wake)
        elastic.check_workers("gpu", 1)  # the learn step runs on cpu slots here
        for args, message in ((("tpu", 1), "resource must be 'cpu' or 'gpu'"),
                              (("cpu", 0), "workers must be an integer >= 1"),
                              (("cpu", 1), "the run's learn steps need 2 learner slots; keep cpu workers")):
            with pytest.raises(ValueError, match=message):
                elastic.check_workers(*args)
    finally:
        executor.close()
    with pytest.raises(ValueError, match="under the local executor only, not 'sync'"):
        _elastic({"qpu": _qpu("a")}, executor="sync").check_workers("cpu", 2)
