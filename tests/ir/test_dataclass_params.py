"""A fragment's param may be a frozen dataclass: the graph holds it as tagged JSON
(``{"__dataclass__": "module:Qualname", "fields": {...}}``) and the function receives the object,
rebuilt once per fragment object (``Classical.kwargs``)."""
import dataclasses
import json
import pickle

import pytest

import hqflow as hq
from hqflow.engine.checkpoint import graph_digest
from hqflow.common.config import check_fields
from hqflow.ir import Graph, GraphError
from hqflow.ir.nodes import Classical, Edge, json_constant

BUILT = []  # one entry per Config constructed


@dataclasses.dataclass(frozen=True)
class Config:
    lr: float = 0.1
    names: tuple[str, ...] = ("a", "b")

    def __post_init__(self):
        check_fields(self, {"lr": (0, None, "(]")})  # turns the JSON list back into a tuple
        BUILT.append(self)


@dataclasses.dataclass(frozen=True)
class Holder:
    value: object = None


@dataclasses.dataclass
class Mutable:
    lr: float = 0.1


def step(x, cfg):
    return {"y": (type(cfg).__name__, cfg.lr * x, cfg.names)}


def graph(cfg=None):
    pipe = hq.Pipeline("dc")
    pipe.input("x")
    pipe.preprocess(step, outputs="y", params={"cfg": Config(lr=0.5) if cfg is None else cfg})
    pipe.output("step.y")
    return pipe.build()


def test_held_as_tagged_json():
    held = dict(graph().fragment("step").params)["cfg"]
    assert held == {"__dataclass__": f"{__name__}:Config", "fields": {"lr": 0.5, "names": ["a", "b"]}}
    assert "params={'cfg': {'__dataclass__'" in str(graph())  # drawn as held, nothing rebuilt


def test_round_trip_through_json_gives_an_equal_frozen_object():
    g = graph()
    again = Graph.from_json(g.to_json())
    assert again.to_json() == g.to_json() and again.fragment("step") == g.fragment("step")
    cfg = again.fragment("step").kwargs["cfg"]
    assert cfg == Config(lr=0.5) and isinstance(cfg.names, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.lr = 1.0
    assert graph_digest(again) == graph_digest(g) != graph_digest(graph(Config(lr=0.25)))


@pytest.mark.parametrize("executor", ["sync", "local"])
def test_the_fragment_receives_the_object_built_once(executor):
    g = graph()
    BUILT.clear()
    res = hq.run(g, [{"x": 1.0}, {"x": 2.0}, {"x": 3.0}], executor=executor)
    assert res.column("y") == [("Config", 0.5 * x, ("a", "b")) for x in (1.0, 2.0, 3.0)]
    assert len(BUILT) == 1  # rebuilt once for the fragment object, not once a step
    hq.run(g, [{"x": 1.0}] * 3, executor=executor)
    assert len(BUILT) == 1  # the same graph's fragment keeps it


def test_kwargs_is_not_part_of_equality_hash_or_pickle_state_that_matters():
    f = graph().fragment("step")
    fresh = dataclasses.replace(f)
    assert f.kwargs["cfg"] == Config(lr=0.5)
    assert f == fresh and repr(f) == repr(fresh)  # the cache is no field
    back = pickle.loads(pickle.dumps(f))  # Ray pickles fragments, computed kwargs and all
    assert back == f and back.kwargs == f.kwargs and back.kwargs["cfg"] is not f.kwargs["cfg"]


def test_other_params_and_other_dicts_are_left_alone():
    plain = {"__dataclass__x": 1, "fields": 2}
    f = Classical("f", "preprocess", fn=f"{__name__}:step", params=(("a", plain), ("b", [1, 2])))
    assert f.kwargs == {"a": plain, "b": [1, 2]}
    loaded = {"__dataclass__": "nowhere:C", "fields": {}, "other": 1}  # a hand-written document: not the tag
    assert Classical("f", "preprocess", fn="m:f", params=(("a", loaded),)).kwargs == {"a": loaded}


def test_refused_when_built():
    with pytest.raises(GraphError, match=r"^param 'cfg' of fragment 'step': dataclass Mutable must be frozen and "
                                         r"defined at module level to be held as a param$"):
        graph(Mutable())

    @dataclasses.dataclass(frozen=True)
    class Local:
        lr: float = 0.1

    with pytest.raises(GraphError, match=r"dataclass test_refused_when_built.<locals>.Local must be frozen and "
                                         r"defined at module level"):
        graph(Local())
    with pytest.raises(GraphError, match=r"^param 'cfg' of fragment 'step': a dict with the key '__dataclass__' is "
                                         r"refused \(that key tags a frozen dataclass\)$"):
        graph({"__dataclass__": "x", "fields": {}})
    with pytest.raises(GraphError, match=r"^init of loop a.b: a dict with the key '__dataclass__'"):
        json_constant({"__dataclass__": "x"}, "init of loop a.b")
    with pytest.raises(GraphError, match=r"a loop's init is JSON data; a frozen dataclass is a fragment's param"):
        Edge(("a", "b"), ("a", "b"), True, 0, json_constant(Config(), "init"))
    with pytest.raises(GraphError, match=r"param 'cfg' of fragment 'step' \(its fields\) must be JSON data"):
        graph(Holder(object()))


def test_a_class_that_cannot_be_rebuilt_is_a_one_line_error_naming_fragment_and_class():
    doc = json.loads(graph().to_json())
    doc["fragments"][0]["params"]["cfg"]["fields"]["lr"] = -1.0
    g = Graph.from_json(json.dumps(doc))
    with pytest.raises(GraphError, match=rf"^fragment 'step': param 'cfg': cannot rebuild {__name__}:Config: "
                                         r"lr must be a number > 0, got -1.0$"):
        g.fragment("step").kwargs
    # a run reports it as the fragment's failure (hqflow.engine.fragments.call_fragment reads kwargs inside its try)
    with pytest.raises(hq.RunFailed, match=r"raised GraphError: fragment 'step': param 'cfg': cannot rebuild"):
        hq.run(Graph.from_json(json.dumps(doc)), [{"x": 1.0}], executor="sync")
    doc["fragments"][0]["params"]["cfg"]["__dataclass__"] = "no_such_module_xyz:Config"
    f = Graph.from_json(json.dumps(doc)).fragment("step")
    with pytest.raises(GraphError, match=r"^fragment 'step': param 'cfg': cannot rebuild no_such_module_xyz:Config: "
                                         r"cannot import function .*No module named 'no_such_module_xyz'$"):
        f.kwargs
