"""The core's small types (issue 23, typed data): outcomes, lanes, ports, executor kinds and the
scheduler's events. Each
round-trips through its data form, prints exactly the text earlier versions printed, and files of
earlier versions, which hold that text, still load."""
import json
import pickle

import numpy as np
import pytest

import hqflow as hq

from hqflow.engine.events import CallDone, TaskDone, Wake
from hqflow.engine.executors import ExecutorKind, LocalExecutor, SyncExecutor
from hqflow.common.lanes import Lane, member
from hqflow.common.outcome import CANCELLED, OK, TIMEOUT, Outcome
from hqflow.engine.ports import PortRef, PortValues, port
from hqflow.engine.scheduler import make_executor
from hqflow.planning.profile import Profile
from hqflow.trace import Span, load_spans, outcome_counts, save_spans


# -- outcomes -------------------------------------------------------------------------------

@pytest.mark.parametrize("outcome, text", [(OK, "ok"), (TIMEOUT, "timeout"), (CANCELLED, "cancelled"),
                                           (Outcome.error("boom: twice"), "error: boom: twice")])
def test_an_outcome_prints_its_old_text_and_round_trips(outcome, text):
    assert str(outcome) == text and Outcome.read(text) == outcome and Outcome.read(outcome) is outcome
    assert Outcome.read(json.loads(json.dumps(outcome.to_dict()))) == outcome
    assert outcome == text and hash(outcome) == hash(text)  # scripts that compare with the text keep working
    assert outcome.ok == (text == "ok")


def test_an_error_carries_its_message_and_only_an_error_has_one():
    e = Outcome.error(ValueError("bad x"))
    assert (e.kind, e.message, e.ok) == ("error", "bad x", False)
    for bad in (lambda: Outcome("error"), lambda: Outcome("ok", "x"), lambda: Outcome("failed")):
        with pytest.raises(ValueError):
            bad()
    for bad in ("error", {"kind": "ok", "code": 1}, ["ok"], None):
        with pytest.raises(ValueError, match="not an outcome"):
            Outcome.read(bad)


def test_outcomes_are_counted_by_kind():
    spans = [Span("a", "execute", Lane("qpu", "q"), 0, 0.0, 1.0, o) for o in (OK, OK, Outcome.error("x"), Outcome.error("y"),
                                                                      TIMEOUT)]
    assert outcome_counts(spans) == {"ok": 2, "error": 2, "timeout": 1}


# -- lanes ------------------------------------------------------------------------------------

LANES = [(Lane("cpu"), "cpu"), (Lane("cpu", slot=0), "cpu/0"), (Lane("gpu", slot=12), "gpu/12"),
         (Lane("cpu", slot=0, label="envs1"), "cpu/0/envs1"), (Lane("qpu", "q"), "qpu:q"),
         (Lane("qpu", "emulated-qpu", 1), "qpu:emulated-qpu#1"),
         (Lane("qpu", "emulated-qpu", 1, slot=0), "qpu:emulated-qpu#1/0"), (Lane("qpu", "emu", slot=2), "qpu:emu/2"),
         (Lane("qpu", "azure:ionq.simulator"), "qpu:azure:ionq.simulator"),
         (Lane("qpu", "q", label="cpu/0"), "qpu:q/cpu/0")]  # a version 1 file's job lane


@pytest.mark.parametrize("lane, text", LANES)
def test_a_lane_prints_its_old_text_and_round_trips(lane, text):
    assert str(lane) == text and Lane.parse(text) == lane
    assert Lane.from_dict(json.loads(json.dumps(lane.to_dict()))) == lane
    assert lane == text and hash(lane) == hash(text) and {lane: 1}[text] == 1  # scripts that use the text


def test_lanes_are_read_by_their_fields_and_sort_as_their_text():
    job = Lane("qpu", "emulated-qpu", 1, slot=0)
    assert (job.kind, job.name, job.member, job.slot, job.quantum) == ("qpu", "emulated-qpu", 1, 0, True)
    assert job.at(None) == Lane("qpu", "emulated-qpu", 1) and Lane("cpu", slot=0).within("envs1").label == "envs1"
    assert [str(x) for x in sorted([Lane("cpu", slot=10), Lane("qpu", "q"), Lane("cpu", slot=2)])] == \
        ["cpu/2", "cpu/10", "qpu:q"]
    assert Lane("qpu", "q", 1) != Lane("qpu", "q", 1, slot=0) and Lane("cpu") != Lane("gpu")
    for bad in (lambda: Lane("tpu"), lambda: Lane("cpu", "x"), lambda: Lane("qpu", "q", -1),
                lambda: Lane.parse(""), lambda: Lane.from_dict({"name": "q"})):
        with pytest.raises(ValueError):
            bad()


def test_a_member_as_a_user_names_it_is_parsed_in_one_place():
    assert member("qpu:emulated-qpu#1") == member("emulated-qpu#1") == Lane("qpu", "emulated-qpu", 1)
    assert member("emulated-qpu") == Lane("qpu", "emulated-qpu")
    lane = Lane("qpu", "a", 2)
    assert member(lane) is lane


# -- spans files of earlier versions --------------------------------------------------------

OLD_SPANS = {"format": "hqflow.spans", "version": 5, "meta": {"workload": "demo"}, "spans": [
    {"fragment": "prep", "kind": "prepare", "resource": "cpu", "step": 0, "start": 0.0, "end": 0.5,
     "outcome": "ok", "version": None, "lane": "cpu/0", "parent_lane": None},
    {"fragment": "circ", "kind": "execute", "resource": "qpu:q", "step": 0, "start": 0.5, "end": 1.0,
     "outcome": "error: injected failure", "version": 0, "lane": "qpu:emu#1/0", "parent_lane": None, "rows": 4},
    {"fragment": "circ", "kind": "execute", "resource": "qpu:q", "step": 0, "start": 1.0, "end": 1.5,
     "outcome": "timeout", "version": 0, "lane": "qpu:emu#0", "service_jobs": 2}]}


def test_a_spans_file_of_an_earlier_version_loads_and_is_written_anew_as_objects(tmp_path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps(OLD_SPANS))
    spans, meta = load_spans(str(old))
    assert meta == {"workload": "demo"}
    assert [s.outcome for s in spans] == [OK, Outcome.error("injected failure"), TIMEOUT]
    assert [str(s.outcome) for s in spans] == [d["outcome"] for d in OLD_SPANS["spans"]]
    assert [s.lane for s in spans] == [Lane("cpu", slot=0), Lane("qpu", "emu", 1, slot=0), Lane("qpu", "emu", 0)]
    assert [s.resource for s in spans] == [Lane("cpu"), Lane("qpu", "q"), Lane("qpu", "q")]
    assert [str(s.row) for s in spans] == [d["lane"] for d in OLD_SPANS["spans"]]
    new = save_spans(str(tmp_path / "new.json"), spans)
    doc = json.loads(open(new).read())
    assert doc["version"] == 6 and doc["spans"][1]["outcome"] == {"kind": "error", "message": "injected failure"}
    assert doc["spans"][1]["lane"] == {"kind": "qpu", "name": "emu", "member": 1, "slot": 0}
    assert doc["spans"][1]["resource"] == {"kind": "qpu", "name": "q"} and doc["spans"][1]["parent_lane"] is None
    assert load_spans(new)[0] == spans


def test_an_old_span_dict_without_a_lane_reads_as_the_resource_itself():
    old = {"fragment": "learn", "kind": "learn", "resource": "gpu", "step": 3, "start": 0.0, "end": 1.0,
           "outcome": "ok", "lane": "", "parent_lane": "cpu/1"}
    span = Span.from_dict(old)
    assert span.lane is None and span.row == Lane("gpu") and span.parent_lane == Lane("cpu", slot=1)
    assert Span.from_dict(span.to_dict()) == span


# -- profiles of earlier versions ----------------------------------------------------------------

OLD_PROFILE = {"format": "hqflow.planning.profile", "version": 1, "overhead": 0.001, "rows": {"circuit": 4}, "backends": [
    {"backend": "qpu:emulated-qpu#1", "pool": "qpu:q", "queue": 0.0, "per_job": 0.01, "per_row": 0.001,
     "per_shot": 0.0, "failure_rate": 0.0, "jobs": 5, "devices": 2}],
    "fragments": [{"fragment": "learn", "resource": "cpu", "seconds": 0.02, "spread": 0.0, "calls": 5}]}


def test_a_profile_of_an_earlier_version_loads_and_is_saved_anew_as_objects(tmp_path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps(OLD_PROFILE))
    prof = Profile.load(str(old))
    b = prof.backend("emulated-qpu#1")
    assert b is prof.backend("qpu:emulated-qpu#1") is prof.backend(Lane("qpu", "emulated-qpu", 1))
    assert (b.backend, b.pool, b.devices) == (Lane("qpu", "emulated-qpu", 1), Lane("qpu", "q"), 2)
    new = prof.save(str(tmp_path / "new.json"))
    doc = json.loads(open(new).read())
    assert doc["backends"][0]["backend"] == {"kind": "qpu", "name": "emulated-qpu", "member": 1}
    assert doc["backends"][0]["pool"] == {"kind": "qpu", "name": "q"}
    assert Profile.load(new) == prof
    with pytest.raises(KeyError, match="no profile of 'qpu:other'; profiled: qpu:emulated-qpu#1"):
        prof.backend("other")



# -- ports and a run's values by port ----------------------------------------------------------

def test_a_port_prints_as_users_write_it_and_round_trips():
    ref = PortRef("adam", "weights")
    assert str(ref) == "adam.weights" and PortRef.parse("adam.weights") == ref == port("adam.weights")
    assert PortRef.parse("a.b.c") == PortRef("a.b", "c")  # the last dot splits, as Pipeline.connect reads it
    assert PortRef.from_dict(json.loads(json.dumps(ref.to_dict()))) == ref and port(ref) is ref
    for bad in ("weights", ".w", "adam.", 3):
        with pytest.raises(ValueError, match="not of the form 'fragment.port'"):
            PortRef.parse(bad)


def test_values_by_port_are_looked_up_by_port_or_by_its_text():
    values = PortValues({"adam.weights": 1, PortRef("count", "n"): 2})
    assert list(values) == [PortRef("adam", "weights"), PortRef("count", "n")]
    assert values["adam.weights"] == values[PortRef("adam", "weights")] == 1 and values.get("count.n") == 2
    assert "count.n" in values and "nope.n" not in values and "nonsense" not in values and 3 not in values
    assert values == {"count.n": 2, "adam.weights": 1} and values != {"count.n": 2}
    with pytest.raises(KeyError):
        values["nope.x"]
    assert pickle.loads(pickle.dumps(values)) == values and "'adam.weights': 1" in repr(values)


def count(n):
    return n + 1


def _counter():
    pipe = hq.Pipeline("counter")
    pipe.preprocess(count, outputs="n")
    pipe.loop("count.n", "count.n", init=0)
    pipe.output("count.n")
    return pipe.build()


def test_a_run_s_state_is_keyed_by_port_and_initial_state_takes_either_key():
    graph = _counter()
    res = hq.run(graph, 3, executor="sync")
    assert list(res.state) == [PortRef("count", "n")] and res.state["count.n"] == 3
    again = hq.run(graph, 2, executor="sync", initial_state=res.state)  # a result's state continues it
    assert again.state["count.n"] == 5
    assert hq.run(graph, 1, executor="sync", initial_state={PortRef("count", "n"): 10}).state["count.n"] == 11
    assert hq.run(graph, 1, executor="sync", initial_state={"count.n": 20}).state["count.n"] == 21


@pytest.mark.parametrize("version", [1, 2, 3])
def test_a_checkpoint_of_an_earlier_version_keyed_by_text_resumes_to_the_uninterrupted_result(tmp_path, version):
    """Version 1 keyed its values by "frag.port" text, version 2 by port objects; both held a value per port
    (version 3: the versions the next steps take, a ``Versions``; version 4: a workload's record too)."""
    from hqflow.workloads import synthetic

    cfg = synthetic.Config(staleness=0, backend="qpu")
    graph, run_dir = synthetic.build_graph(cfg), tmp_path / "run"

    def run(steps, **kw):
        return hq.run(graph, synthetic.stream(steps, cfg), backends={"qpu": "reference"}, executor="sync", seed=5,
                      **kw)

    run(3, run_dir=str(run_dir))
    saved = pickle.loads((run_dir / "state.pkl").read_bytes())
    assert saved["version"] == 4 and saved["state"][0][0] == {"fragment": "learn", "port": "weights"}
    assert saved["record"] is None
    values = [(ref, kept.values[saved["steps"]]) for ref, kept in saved["state"]]
    old = {k: v for k, v in saved.items() if k != "record"} | {"version": version, "state": saved["state"]
          if version == 3 else {str(PortRef.from_dict(ref)): value for ref, value in values}
          if version == 1 else [[ref, value] for ref, value in values]}
    (run_dir / "state.pkl").write_bytes(pickle.dumps(old, protocol=4))  # as that version wrote it
    resumed, clean = run(6, run_dir=str(run_dir), resume=True), run(6)
    assert resumed.outputs == clean.outputs and min(s.step for s in resumed.spans) == 3
    np.testing.assert_array_equal(resumed.state["learn.weights"], clean.state["learn.weights"])


# -- executor kinds -------------------------------------------------------------------------------

def test_an_executor_is_named_by_users_and_typed_inside():
    cfg = hq.SchedulerConfig(executor="sync")
    assert cfg.executor is ExecutorKind.SYNC and cfg.executor.one_at_a_time and not cfg.executor.resizable
    assert hq.SchedulerConfig().executor is ExecutorKind.LOCAL and ExecutorKind.LOCAL.resizable
    assert not ExecutorKind.RAY.one_at_a_time and not ExecutorKind.RAY.resizable
    assert cfg.executor == "sync" and str(cfg.executor) == f"{cfg.executor}" == "sync"  # still its name
    assert "executor='sync'" in repr(cfg) and json.loads(json.dumps({"executor": cfg.executor})) == {"executor": "sync"}
    with pytest.raises(ValueError, match="executor must be 'sync', 'local' or 'ray', got 'threads'"):
        hq.SchedulerConfig(executor="threads")
    for kind, cls in (("sync", SyncExecutor), (ExecutorKind.LOCAL, LocalExecutor)):
        executor = make_executor(hq.SchedulerConfig(executor=kind))
        assert type(executor) is cls and executor.kind is ExecutorKind(kind)
        executor.close()


def test_a_run_directory_s_saved_policy_loads_with_its_executor_s_name():
    from hqflow.engine.distribution import get_distribution

    saved = json.loads(json.dumps({"distribution": "multi-learner", "distribution_options": {
        "learners": 2, "staleness": 0, "actors": 1, "executor": "local", "placement": {}, "compression": {}}}))
    policy = get_distribution(saved["distribution"], **saved["distribution_options"])
    assert policy.executor is ExecutorKind.LOCAL and policy.scheduler_config().executor is ExecutorKind.LOCAL
    assert json.loads(json.dumps(policy.options()))["executor"] == "local"  # and saves as it did
    assert get_distribution("sync").scheduler_config().executor.one_at_a_time


_PLACED = '"placement": {"actors": "spread", "learner": null, "backends": "default"}'
SAVED_POLICIES = [  # a run directory's config.json as written when each policy was a class of its own (issue 35)
    ("sync", "{}", "Sync()"),
    ("pipelined", '{"staleness": 0, "actors": 2}', "Pipelined(staleness=0, actors=2)"),
    ("ray-actors", '{"staleness": 1, "actors": 3, ' + _PLACED + "}", "RayActors(staleness=1, actors=3, placement="
     "Placement(actors='spread', learner=None, backends='default'))"),
    ("multi-learner", '{"learners": 2, "staleness": 0, "actors": 1, "executor": "local", ' + _PLACED
     + ', "compression": {"kind": "topk", "ratio": 0.25}}', "MultiLearner(learners=2, staleness=0, actors=1, "
     "executor='local', placement=Placement(actors='spread', learner=None, backends='default'), "
     "compression=Compression(kind='topk', ratio=0.25))"),
]


@pytest.mark.parametrize("name, saved, text", SAVED_POLICIES)
def test_a_saved_policy_of_each_kind_loads_and_saves_as_it_was_written(name, saved, text):
    """A distribution is one type with presets (issue 36); run directories written before still load, and
    the policy saves the same options, byte for byte, and runs with the same scheduler settings."""
    from hqflow.distribution import get_distribution

    policy = get_distribution(name, **json.loads(saved))
    assert str(policy) == text and json.dumps(policy.options()) == saved
    assert get_distribution(policy) == policy == get_distribution(name, **policy.options())
    config = policy.scheduler_config(seed=4)
    options = json.loads(saved)
    assert (config.seed, policy.staleness, config.cpu_workers) == (4, options.get("staleness", 0),
                                                                   options.get("actors", 1))
    assert config.executor == options.get("executor", {"sync": "sync", "pipelined": "local"}.get(name, "ray"))
    assert (config.learners, config.gpu_workers) == (options.get("learners", 1),) * 2


def test_a_run_s_statistics_name_its_executor():
    assert hq.run(_counter(), 1, executor="sync").extra["executor"] == "sync"


# -- events ----------------------------------------------------------------------------------

def test_events_are_told_apart_by_type():
    seen = []
    for event in (TaskDone(None, 0, None, Lane("cpu", slot=0), 0.0, 1.0, None), CallDone(None, 1, None, None), Wake()):
        match event:
            case TaskDone(step=step):
                seen.append(("task", step))
            case CallDone(step=step):
                seen.append(("call", step))
            case Wake():
                seen.append(("wake",))
    assert seen == [("task", 0), ("call", 1), ("wake",)]
