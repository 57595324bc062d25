"""The IR's node types: ``Classical`` and ``CircuitCall`` on the ``Fragment`` base (issue 23)."""
import dataclasses
import json
import re

import numpy as np
import pytest

import hqflow as hq
from hqflow.ir import Circuit, CircuitCall, Classical, Fragment, Graph, GraphError, Port, execute_ports
from hqflow.ir.nodes import CLASSICAL_KINDS, KINDS


def encode(x):
    return np.pi * np.asarray(x)


def loss(values):
    return float(np.mean(values))


def _template():
    c = Circuit(1, name="one")
    x, w = c.inputs("x", 1), c.weights("w", 1)
    c.ry(x[0], 0).rx(w[0], 0)
    return c.build(observables=["Z0"])


def _graph() -> Graph:
    pipe = hq.Pipeline("old")
    pipe.input("x", "array").input("weights", "array")
    pipe.prepare(encode, outputs={"angles": "array"})
    pipe.execute("exe", _template())
    pipe.connect("encode.angles", "exe.inputs")
    pipe.postprocess(loss, outputs={"loss": "scalar"}, job_backends="qpu")
    pipe.output("loss.loss")
    return pipe.build(validate=False)


# What hqflow (before the node types, commit 0b95fe2) wrote for _graph() with indent=None, this module's
# functions named MOD; the QPY blob beside the gates holds fresh parameter UUIDs (hqflow reads "ops").
OLD = (
    '{"format": "hqflow.graph", "version": 2, "name": "old", "inputs": [{"name": "x", "type": "array"}, {"name": '
    '"weights", "type": "array"}], "outputs": [{"name": "loss", "type": "any"}], "fragments": [{"name": "encode",'
    ' "kind": "prepare", "resource": "cpu", "inputs": [{"name": "x", "type": "any"}], "outputs": [{"name": "angle'
    's", "type": "array"}], "fn": "MOD:encode", "params": {}, "circuit": null, "backend": null, "gradient": null}'
    ', {"name": "exe", "kind": "execute", "resource": "qpu", "inputs": [{"name": "inputs", "type": "array"}, {"na'
    'me": "weights", "type": "array"}], "outputs": [{"name": "values", "type": "array"}], "fn": null, "params": {'
    '}, "circuit": {"name": "one", "n_qubits": 1, "inputs": ["x[0]"], "weights": ["w[0]"], "observables": [[[1.0,'
    ' "Z0"]]], "shots": null, "ops": [["ry", [0], [["input", 0, 1.0, 0.0]]], ["rx", [0], [["weight", 0, 1.0, 0.0]'
    ']]], "qpy": "UUlTS0lUEgIGAgAAAAAAAAABcHEAAAAAAAAAHAADZgAIAAAAAQAAAAAAAAAAAAAAAgAAAAEAAAAAAAAAAgAAAABvbmUAAAA'
    'AAAAAAHt9cQEAAAABAAEBAXEAAAAAAAAAAAAAAAAAAAAAAAAABgAAAAEAAAABAAAAAAAAAAAAAAAAAAAAAAAAAAAAAABSWUdhdGVxAAAAAHA'
    'AAAAAAAAAFgAEX4g5eWnqTbyxur0lLvtS5nhbMF0ABgAAAAEAAAABAAAAAAAAAAAAAAAAAAAAAAAAAAAAAABSWEdhdGVxAAAAAHAAAAAAAAA'
    'AFgAEIw2NpQTyRDSr7kgxI3VfX3dbMF0A////////////////AAAAAAAAAAA="}, "backend": "compiled", "gradient": null}, {'
    '"name": "loss", "kind": "postprocess", "resource": "cpu", "inputs": [{"name": "values", "type": "any"}], "ou'
    'tputs": [{"name": "loss", "type": "scalar"}], "fn": "MOD:loss", "params": {}, "circuit": null, "backend": nu'
    'll, "gradient": null, "job_backends": ["qpu"]}], "edges": [{"src": ["encode", "angles"], "dst": ["exe", "inp'
    'uts"], "loop": false, "max_staleness": 0, "init": null}, {"src": ["loss", "loss"], "dst": [null, "loss"], "l'
    'oop": false, "max_staleness": 0, "init": null}, {"src": [null, "x"], "dst": ["encode", "x"], "loop": false, '
    '"max_staleness": 0, "init": null}, {"src": [null, "weights"], "dst": ["exe", "weights"], "loop": false, "max'
    '_staleness": 0, "init": null}, {"src": ["exe", "values"], "dst": ["loss", "values"], "loop": false, "max_sta'
    'leness": 0, "init": null}]}'
).replace("MOD", __name__)


def _no_qpy(text: str) -> str:
    return re.sub(r'"qpy": "[^"]*"', '"qpy": "-"', text)


# --- the two types ------------------------------------------------------------------


def test_the_two_types_and_their_fields():
    t = _template()
    ins, outs = execute_ports(t, None)
    call = CircuitCall("exe", inputs=ins, outputs=outs, circuit=t, backend="compiled")
    assert (call.kind, call.resource, call.gradient) == ("execute", "qpu", None)
    assert isinstance(call, Fragment) and not hasattr(call, "fn") and not hasattr(call, "job_backends")
    work = Classical("enc", "prepare", (Port("x"),), (Port("y"),), fn=f"{__name__}:encode", params=(("k", 2),))
    assert (work.kind, work.resource, work.kwargs, work.job_backends) == ("prepare", "cpu", {"k": 2}, ())
    assert isinstance(work, Fragment) and not hasattr(work, "circuit") and not hasattr(work, "backend")
    assert work.port("y", output=True) == Port("y") and work.port("y", output=False) is None
    assert set(CLASSICAL_KINDS) | {"execute"} == set(KINDS)


@pytest.mark.parametrize("kind", CLASSICAL_KINDS)
def test_a_circuit_call_of_another_kind_is_refused(kind):
    with pytest.raises(GraphError) as err:
        CircuitCall("exe", kind, circuit=_template(), backend="compiled")
    assert str(err.value) == (f"fragment 'exe': a CircuitCall's kind is 'execute', not {kind!r}; "
                              "preprocess, prepare, postprocess, learn work is a Classical fragment")
    assert "\n" not in str(err.value)


def test_a_classical_execute_fragment_is_refused():
    with pytest.raises(GraphError) as err:
        Classical("exe", "execute", fn=f"{__name__}:encode")
    assert str(err.value) == ("fragment 'exe': an execute fragment is a CircuitCall (a circuit on a backend); "
                              "a Classical fragment is one of preprocess, prepare, postprocess, learn")
    # dataclasses.replace builds anew, so it cannot turn one into the other's kind either
    work = Classical("enc", "prepare", fn=f"{__name__}:encode")
    with pytest.raises(GraphError, match="is a CircuitCall"):
        dataclasses.replace(work, kind="execute")
    with pytest.raises(GraphError, match="kind is 'execute', not 'learn'"):
        dataclasses.replace(CircuitCall("exe"), kind="learn")


def test_a_bare_fragment_and_positional_type_fields_are_refused():
    with pytest.raises(GraphError, match="built as one of its types, Classical .* or CircuitCall"):
        Fragment("f", "preprocess")
    # the old positional order (..., fn, resource, params) cannot land a function in ``resource``
    with pytest.raises(TypeError):
        Classical("f", "preprocess", (), (), f"{__name__}:encode", "gpu")
    with pytest.raises(TypeError):
        CircuitCall("exe", "execute", (), (), "qpu", _template())


def test_an_unknown_classical_kind_builds_and_validate_names_it():
    work = Classical("f", "magic", (), (), fn=f"{__name__}:encode")
    g = Graph("g", (work,), ())
    with pytest.raises(GraphError, match="fragment 'f': unknown kind 'magic'"):
        g.validate()


def test_dispatch_by_type():
    g = _graph()
    by_type = {f.name: type(f) for f in g.fragments}
    assert by_type == {"encode": Classical, "exe": CircuitCall, "loss": Classical}
    assert [f.name for f in g.fragments if isinstance(f, CircuitCall)] == ["exe"]
    assert g.fragment("loss").job_backends == ("qpu",)
    assert g.validate(resolve=True) is g


def test_a_third_fragment_type_is_a_problem_not_a_crash():
    @dataclasses.dataclass(frozen=True)
    class Other(Fragment):
        pass

    g = Graph("g", (Other("o", "preprocess"),), ())
    with pytest.raises(GraphError, match="fragment 'o': a Other is neither a Classical fragment nor a CircuitCall"):
        g.validate()


# --- JSON ---------------------------------------------------------------------------


def test_json_round_trip_keeps_the_types():
    g = _graph()
    again = Graph.from_json(g.to_json())
    assert [type(f) for f in again.fragments] == [type(f) for f in g.fragments]
    assert again.fragments == g.fragments and again.edges == g.edges
    # every fragment has the same keys, in the same order, whatever its type
    keys = [list(f) for f in json.loads(g.to_json())["fragments"]]
    base = ["name", "kind", "resource", "inputs", "outputs", "fn", "params", "circuit", "backend", "gradient"]
    assert keys == [base, base, base + ["job_backends"]]


def test_an_old_document_loads_and_is_written_back_byte_for_byte():
    g = Graph.from_json(OLD)
    assert [type(f) for f in g.fragments] == [Classical, CircuitCall, Classical]
    assert g.fragment("exe").backend == "compiled" and g.fragment("loss").job_backends == ("qpu",)
    assert g.validate() is g
    assert _no_qpy(g.to_json(indent=None)) == _no_qpy(OLD)
    assert _no_qpy(_graph().to_json(indent=None)) == _no_qpy(OLD)  # what Pipeline builds, as before


def test_an_old_document_without_resources_gets_each_types_default():
    doc = json.loads(OLD)
    for f in doc["fragments"]:
        del f["resource"]
    g = Graph.from_json(json.dumps(doc))
    assert [f.resource for f in g.fragments] == ["cpu", "qpu", "cpu"]


@pytest.mark.parametrize("frag, key, value, message", [
    (1, "fn", f"{__name__}:encode", "fragment 'exe': an execute fragment runs its circuit on its backend; "
                                    "it holds no 'fn' (a classical fragment's fields)"),
    (1, "params", {"k": 1}, "holds no 'params'"),
    (1, "job_backends", ["qpu"], "holds no 'job_backends'"),
    (0, "backend", "compiled", "fragment 'encode': a prepare fragment holds no 'backend' (an execute fragment's fields)"),
    (2, "gradient", "param-shift", "a postprocess fragment holds no 'gradient'"),
])
def test_a_field_of_the_other_type_is_refused_on_load(frag, key, value, message):
    doc = json.loads(OLD)
    doc["fragments"][frag][key] = value
    with pytest.raises(GraphError, match=re.escape(message)):
        Graph.from_json(json.dumps(doc))
