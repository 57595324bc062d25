"""hqflow.engine.window, by itself: the window's size, each step's values, and the loop-carried versions a
consumer may take under bounded staleness (versions forgotten, checkpointed, restored, the final state)."""
from types import SimpleNamespace

import numpy as np
import pytest

import hqflow as hq
from hqflow.ir.graph import GraphError
from hqflow.engine.ports import PortRef
from hqflow.engine.scheduler_config import SchedulerConfig
from hqflow.engine.window import Values, Versions, Window


def act(x, acc):
    return {"y": x + acc}


def total(y, acc):
    return {"acc": acc + y}


def _graph(staleness=1, init=0.0):
    """``act`` reads the learner's ``acc`` up to ``staleness`` versions old; ``total`` its own, fresh."""
    pipe = hq.Pipeline("window")
    pipe.input("x", "scalar")
    pipe.preprocess(act, outputs={"y": "scalar"})
    pipe.connect("input.x", "act.x")
    pipe.learn(total, outputs={"acc": "scalar"})
    pipe.connect("act.y", "total.y")
    pipe.loop("total.acc", "total.acc", init=init)
    pipe.loop("total.acc", "act.acc", init=init, max_staleness=staleness)
    pipe.output("total.acc")
    return pipe.build()


def _pools(*capacities, removed=()):
    members = [SimpleNamespace(capacity=c, removed=k in removed) for k, c in enumerate(capacities)]
    return {"qpu": SimpleNamespace(members=members)}


def test_the_window_is_the_configs_or_twice_the_jobs_in_flight_plus_two_and_at_least_eight():
    assert Window(SchedulerConfig(), _pools(2)).size == 8
    assert Window(SchedulerConfig(), _pools(3, 4, 9, removed=(2,))).size == 2 * 7 + 2
    assert Window(SchedulerConfig(window=5), _pools(30)).size == 5
    assert Window(SchedulerConfig(window=5, executor="sync"), _pools(30)).size == 1  # one thing at a time: one step


def test_the_window_grows_with_the_pools_and_never_shrinks():
    pools = _pools(4, 4)
    window = Window(SchedulerConfig(), pools)
    assert window.size == 18
    pools["qpu"].members.append(SimpleNamespace(capacity=6, removed=False))
    window.grow()
    assert window.size == 30
    for m in pools["qpu"].members:
        m.removed = True
    window.grow()
    assert window.size == 30


def test_a_step_is_ready_when_its_inputs_are_and_its_outputs_are_taken_once_it_is_done():
    graph = _graph(staleness=0)
    values = Values(graph)
    act_, total_ = graph.fragment("act"), graph.fragment("total")
    assert values.inputs(act_, 0) is None  # not admitted yet
    values.admit(0, {"x": 3.0})
    assert values.inputs(act_, 0) == ({"x": 3.0, "acc": 0.0}, 0)
    assert values.inputs(total_, 0) is None  # act has not run
    values.produced("act", 0, {"y": 3.0})
    assert values.inputs(total_, 0) == ({"y": 3.0, "acc": 0.0}, 0)
    values.produced("total", 0, {"acc": 3.0})
    assert values.finish(0) == {"acc": 3.0}
    assert values.steps == {}  # the step's values are dropped
    values.admit(1, {"x": 1.0})
    assert values.inputs(act_, 1) == ({"x": 1.0, "acc": 3.0}, 1)  # version 1: step 0's output


@pytest.mark.parametrize("staleness", [0, 1, 2])
def test_a_consumer_takes_the_version_its_staleness_before_its_step_never_a_newer_one(staleness):
    """Step i takes version i - k (the first steps version 0), whatever else exists by then: which version a step
    takes never depends on timing, so a run is a function of its seed (34.1; it took the newest within k)."""
    graph = _graph(staleness)
    values, act_ = Values(graph), graph.fragment("act")
    for step in range(4):
        values.admit(step, {"x": 0.0})
    # no step has finished: only version 0 exists, which steps up to ``staleness`` take
    ready = [step for step in range(4) if values.inputs(act_, step) is not None]
    assert ready == list(range(staleness + 1))
    values.produced("total", 0, {"acc": 10.0})  # version 1
    assert values.inputs(act_, 1) == ({"x": 0.0, "acc": 10.0 if staleness == 0 else 0.0}, max(0, 1 - staleness))
    assert values.inputs(act_, staleness + 1) == ({"x": 0.0, "acc": 10.0}, 1)  # ready now, on version 1
    assert values.inputs(act_, 0)[1] == 0  # a consumer never takes a version from its future


def test_old_versions_are_forgotten_but_the_newest_and_those_still_usable_stay():
    graph = _graph(staleness=2)
    values = Values(graph)
    for t in range(5):
        values.produced("total", t, {"acc": float(t + 1)})
    loop_to_act = next(i for i, e in values.edges.items() if e.dst[0] == "act")
    loop_to_total = next(i for i, e in values.edges.items() if e.dst[0] == "total")
    values.forget(4)  # the oldest unfinished step is 4
    assert sorted(values.versions[loop_to_act]) == [2, 3, 4, 5]  # act at step 4 may take versions 2..4
    assert sorted(values.versions[loop_to_total]) == [4, 5]
    values.forget(9)
    assert sorted(values.versions[loop_to_act]) == [5] and sorted(values.versions[loop_to_total]) == [5]


def test_a_checkpoints_state_is_every_edges_value_at_one_version_with_those_the_next_steps_take():
    graph = _graph(staleness=1)
    values = Values(graph)
    values.produced("total", 0, {"acc": 2.0})
    assert values.at(1) == {PortRef("total", "acc"): Versions({0: 0.0, 1: 2.0})}  # step 1 takes version 0
    assert values.at(7) is None
    restored = Values(graph)
    restored.restore(1, values.at(1))
    act_, total_ = graph.fragment("act"), graph.fragment("total")
    restored.admit(1, {"x": 5.0})
    assert restored.inputs(act_, 1) == ({"x": 5.0, "acc": 0.0}, 0)  # as the run that was never stopped
    restored.produced("act", 1, {"y": 5.0})
    assert restored.inputs(total_, 1) == ({"y": 5.0, "acc": 2.0}, 1)
    assert restored.newest()["total.acc"] == 2.0


def test_initial_values_come_from_init_or_the_initial_state_by_port_and_are_typed_for_the_consumer():
    values = Values(_graph(init=[1.0, 2.0]))
    assert all(isinstance(v[0], np.ndarray) for v in values.versions.values())  # a list reaches a port as an array
    values = Values(_graph(), {"total.acc": 5.0})
    assert {v[0] for v in values.versions.values()} == {5.0}
    values = Values(_graph(), {PortRef("total", "acc"): 6.0})
    assert values.newest()["total.acc"] == 6.0


def test_initial_state_naming_no_loop_source_or_a_loop_without_a_value_is_refused():
    with pytest.raises(GraphError, match=r"initial_state names \['act.y', 'nonsense'\], which are not loop-carried"):
        Values(_graph(), {"act.y": 1.0, "nonsense": 2.0})
    pipe = hq.Pipeline("no-init")
    pipe.input("x", "scalar")
    pipe.learn(total, outputs={"acc": "scalar"})
    pipe.connect("input.x", "total.y")
    pipe.loop("total.acc", "total.acc")
    pipe.output("total.acc")
    with pytest.raises(GraphError, match="has no initial value; give init= or initial_state"):
        Values(pipe.build())
