"""The simulated clock (hqflow.common.clock) and the cost model that runs the scheduler's own loop on it."""
import queue

import pytest

import hqflow as hq
from hqflow.planning import costmodel, simulated
from hqflow.common.clock import REAL, SimClock
from hqflow.common.lanes import Lane
from hqflow.planning.profile import BackendProfile, FragmentProfile, Profile
from hqflow.engine.scheduler import Scheduler
from hqflow.engine.window import Window
from hqflow.workloads import synthetic


def test_actions_run_in_time_order_and_ties_in_the_order_they_were_given():
    clock, events, seen = SimClock(), queue.Queue(), []
    clock.at(2.0, lambda: seen.append(("b", clock.now())))
    clock.at(1.0, lambda: seen.append(("a", clock.now())))
    clock.at(2.0, lambda: (seen.append(("c", clock.now())), events.put("done")))
    clock.at(3.0, lambda: events.put("late"))
    assert clock.wait(events) == "done"
    assert seen == [("a", 1.0), ("b", 2.0), ("c", 2.0)] and clock.now() == 2.0
    clock.at(0.5, lambda: events.put("past"))  # never earlier than now: at once, in turn
    assert clock.wait(events) == "past" and clock.now() == 2.0
    assert clock.wait(events) == "late" and clock.now() == 3.0


def test_a_simulation_with_nothing_left_to_wait_for_says_so():
    with pytest.raises(RuntimeError, match="nothing left to wait for"):
        SimClock().wait(queue.Queue())


def test_the_real_clock_reads_the_machine_and_blocks_on_the_queue():
    events = queue.Queue()
    events.put("x")
    a = REAL.now()
    assert REAL.wait(events) == "x" and REAL.now() >= a


def _profile(c, q):
    return Profile((BackendProfile(Lane("qpu", "q"), Lane("qpu", "qpu"), 0.0, q, 0.0, 0.0, 0.0, None, jobs=10),),
                   (FragmentProfile("learn", "cpu", c, 0.0, 10),))


def test_the_prediction_is_the_schedulers_own_loop_so_a_changed_rule_changes_it(monkeypatch):
    graph, n = synthetic.build_graph(synthetic.Config(staleness=1, backend="qpu")), 20
    cfg = hq.SchedulerConfig(executor="local")
    pipelined = costmodel.predict(graph, n, _profile(0.01, 0.02), cfg)
    assert pipelined.makespan == pytest.approx(n * 0.02 + 0.01)
    # the scheduler admits one step at a time: the same prediction call now sees a serial loop
    monkeypatch.setattr(Window, "auto", lambda self: 1)
    assert costmodel.predict(graph, n, _profile(0.01, 0.02), cfg).makespan == pytest.approx(n * 0.03)


def test_a_simulated_run_computes_nothing_and_its_trace_has_the_predicted_times():
    graph = synthetic.build_graph(synthetic.Config(staleness=0, backend="qpu"))
    clock = SimClock()
    host = simulated.Host(clock, None)
    backend = simulated.SimBackend(_profile(0.01, 0.02).backends[0], clock, host, 0.0, None)
    executor = simulated.SimExecutor(_profile(0.01, 0.02), clock, host, {f.name: 4 for f in graph.fragments}, {})
    result = Scheduler(graph, {"qpu": backend}, hq.SchedulerConfig(executor="local"), executor=executor,
                       clock=clock).run(({"x": None} for _ in range(3)))
    assert result.seconds == pytest.approx(3 * 0.03)
    jobs = [s for s in result.spans if s.resource == "qpu:qpu"]
    assert [(s.step, s.rows) for s in jobs] == [(0, 4), (1, 4), (2, 4)]
    assert [round(s.end - s.start, 9) for s in jobs] == [0.02] * 3
    assert all(v is None for out in result.outputs for v in out.values())


def test_work_on_the_host_shares_its_cores():
    clock, events = SimClock(), queue.Queue()
    host = simulated.Host(clock, 1.0)
    host.run(1.0, lambda: events.put(("a", clock.now())))
    clock.at(0.5, lambda: host.run(0.25, lambda: events.put(("b", clock.now()))))
    # from 0.5 both run at half speed: b's 0.25 s of work ends at 1.0, a's last 0.25 s then at full speed
    assert clock.wait(events) == ("b", pytest.approx(1.0))
    assert clock.wait(events) == ("a", pytest.approx(1.25))
    two = simulated.Host(clock, 2.0)
    start = clock.now()
    for name in "xyz":
        two.run(1.0, lambda name=name: events.put((name, clock.now() - start)))
    assert [clock.wait(events) for _ in range(3)] == [(n, pytest.approx(1.5)) for n in "xyz"]  # 3 on 2 cores


def test_jobs_that_compute_on_this_machine_contend_with_each_other_and_with_classical_calls():
    graph, n = synthetic.build_graph(synthetic.Config(staleness=2, backend="qpu")), 20
    computing = tuple(BackendProfile(Lane("qpu", "q", k), Lane("qpu", "qpu"), 0.0, 0.0, 0.0, 0.0, 0.0, None, jobs=10,
                                     compute_per_job=0.02) for k in range(2))
    free = Profile(computing, (FragmentProfile("learn", "cpu", 0.001, 0.0, 10),))
    # two members whose jobs compute 20 ms each: side by side when the machine has the cores for them
    assert costmodel.predict(graph, n, free, rows=1).makespan == pytest.approx(n * 0.01, rel=0.15)
    one_core = Profile(computing, free.fragments, cores=1.0)
    assert costmodel.predict(graph, n, one_core, rows=1).makespan == pytest.approx(n * 0.02 + 0.002, rel=0.05)


def test_work_shared_far_from_time_zero_always_ends():
    """A clock hours from 0 cannot step by less than its own precision: every piece still ends, in order."""
    import random

    clock, events = SimClock(), queue.Queue()
    clock.at(8 * 3600.0, lambda: events.put("late"))
    assert clock.wait(events) == "late"
    host, draw = simulated.Host(clock, 1.3), random.Random(7)
    works = [draw.uniform(1e-6, 0.05) for _ in range(200)]
    for k, work in enumerate(works):
        clock.at(clock.now() + draw.uniform(0, 0.5), lambda k=k, work=work: host.run(work, lambda k=k: events.put(k)))
    done = [clock.wait(events) for _ in works]
    assert sorted(done) == list(range(200)) and clock.now() < 8 * 3600.0 + 0.5 + sum(works)
