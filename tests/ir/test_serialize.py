"""Graphs to and from JSON: clear errors on malformed input, exact round trips."""
import json

import numpy as np
import pytest

import hqflow as hq
from hqflow.ir import Circuit, Classical, Edge, Graph, GraphError, Port
from hqflow.ir.random import random_template

# --- module-level fragment functions ----------------------------------------------


def encode(batch, scale):
    return scale * np.asarray(batch)


def step(values, jacobian, weights, target, lr):
    err = values[:, 0] - np.asarray(target)
    grad = (2 * err[:, None] * jacobian[:, 0, :]).mean(0)
    return {"weights": np.asarray(weights) - lr * grad, "loss": float((err**2).mean())}


def accumulate(x, total, decay):
    new = decay * np.asarray(total) + np.asarray(x)
    return new, float(new.sum())


def sample_stats(counts):
    return {"n_keys": len(counts[0]), "ones": sum(v for k, v in counts[0].items() if k.startswith("1"))}


def classical_graph() -> Graph:
    """No execute fragment: loop with init, params, typed ports."""
    pipe = hq.Pipeline("classical")
    pipe.input("x", "array")
    pipe.preprocess(accumulate, outputs={"total": "array", "norm": "scalar"}, params={"decay": 0.5})
    pipe.loop("accumulate.total", "accumulate.total", init=[0.0, 0.0, 0.0], max_staleness=2)
    pipe.output("accumulate.norm", "norm", "scalar")
    return pipe.build()


def training_graph(shots=None) -> Graph:
    c = Circuit(2, name="tiny")
    x = c.inputs("x", 2)
    w = c.weights("w", 3)
    c.ry(2 * x[0] + 0.1, 0).ry(x[1], 1).cz(0, 1).ry(w[0], 0).crx(-0.5 * w[1] + 0.25, 0, 1).u(w[2], 0.3, w[0], 1)
    t = c.build(observables=["Z0 Z1", [(0.5, "X0"), (-1.5, "Y1")]], shots=shots)
    pipe = hq.Pipeline("tiny")
    pipe.input("batch", "array").input("target", "array")
    pipe.prepare(encode, outputs={"angles": "array"}, params={"scale": np.pi})
    pipe.execute("circuit", t, gradient="param-shift")
    pipe.connect("encode.angles", "circuit.inputs")
    pipe.learn(step, outputs={"weights": "array", "loss": "scalar"}, params={"lr": 0.3})
    pipe.loop("step.weights", ["circuit.weights", "step.weights"], init=[0.1, 0.2, -0.3])
    pipe.output("step.loss")
    pipe.output("circuit.values", "values")
    return pipe.build()


def sampling_graph() -> Graph:
    c = Circuit(3, name="ghz")
    w = c.weights("w", 1)
    c.ry(w[0], 0).cx(0, 1).cx(1, 2)
    pipe = hq.Pipeline("sampler")
    pipe.input("weights", "array")
    pipe.execute("circuit", c.build(shots=200))
    pipe.postprocess(sample_stats, outputs=("n_keys", "ones"))
    pipe.output("sample_stats.ones")
    pipe.output("circuit.counts")
    return pipe.build()


def stream(n=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, (6, 2))
    Y = 0.5 * np.cos(np.pi * X[:, 0])
    return [{"batch": X, "target": Y}] * n


def same_graph(a: Graph, b: Graph) -> None:
    assert a.name == b.name
    assert a.fragments == b.fragments
    assert a.edges == b.edges
    assert a.inputs == b.inputs and a.outputs == b.outputs
    assert a == b


def outputs_equal(r1, r2) -> None:
    assert len(r1.outputs) == len(r2.outputs)
    for o1, o2 in zip(r1.outputs, r2.outputs):
        assert o1.keys() == o2.keys()
        for k in o1:
            if isinstance(o1[k], np.ndarray):
                np.testing.assert_array_equal(o1[k], o2[k])
            else:
                assert o1[k] == o2[k]


# --- malformed JSON -------------------------------------------------------------


def test_not_valid_json():
    with pytest.raises(GraphError, match=r"not valid JSON: Expecting .* at line 1 column 2"):
        Graph.from_json("{")
    with pytest.raises(GraphError, match=r"not valid JSON: .* at line 3 column \d+"):
        Graph.from_json('{\n  "format": "hqflow.graph",\n  "fragments": [,]\n}')


def _doc(**changes):
    doc = json.loads(classical_graph().to_json())
    doc.update(changes)
    return doc


def _load(doc) -> Graph:
    return Graph.from_json(json.dumps(doc))


def test_document_must_be_an_object():
    with pytest.raises(GraphError, match="graph JSON: document must be an object, got list"):
        Graph.from_json("[]")


def test_wrong_format():
    with pytest.raises(GraphError, match="graph JSON: format is 'other.thing', expected 'hqflow.graph'"):
        _load(_doc(format="other.thing"))


def test_newer_version():
    with pytest.raises(GraphError, match=r"graph JSON: version 3 is newer than this hqflow reads \(2\)"):
        _load(_doc(version=3))


def test_format_and_version_default_when_absent():
    doc = _doc()
    del doc["format"], doc["version"]
    same_graph(_load(doc), classical_graph())


def test_missing_keys():
    doc = _doc()
    del doc["fragments"][0]["kind"]
    with pytest.raises(GraphError, match="graph JSON: fragment 'accumulate' lacks 'kind'"):
        _load(doc)
    doc = _doc()
    del doc["fragments"][0]["name"]
    with pytest.raises(GraphError, match="graph JSON: fragment #0 lacks 'name'"):
        _load(doc)
    doc = _doc()
    del doc["edges"]
    with pytest.raises(GraphError, match="graph JSON: document lacks 'edges'"):
        _load(doc)
    doc = _doc()
    del doc["edges"][1]["dst"]
    with pytest.raises(GraphError, match="graph JSON: edge #1 lacks 'dst'"):
        _load(doc)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["fragments"][0].update(kind=3), "graph JSON: fragment 'accumulate': 'kind' must be str, got int"),
        (lambda d: d["fragments"][0].update(params=[1, 2]), "graph JSON: fragment 'accumulate': 'params' must be dict, got list"),
        (lambda d: d["fragments"][0].update(fn=7), "graph JSON: fragment 'accumulate': 'fn' must be str/NoneType, got int"),
        (lambda d: d["fragments"][0].update(circuit="qpy"), "graph JSON: fragment 'accumulate': 'circuit' must be dict/NoneType, got str"),
        (lambda d: d["fragments"][0].update(inputs={"x": "array"}), "graph JSON: fragment 'accumulate': 'inputs' must be list, got dict"),
        (lambda d: d["fragments"][0]["inputs"][0].update(type=1), r"graph JSON: fragment 'accumulate' inputs\[0\]: 'type' must be str, got int"),
        (lambda d: d["fragments"][0]["outputs"].append("y"), r"graph JSON: fragment 'accumulate' outputs\[2\] must be an object, got str"),
        (lambda d: d.update(fragments={}), "graph JSON: document: 'fragments' must be list, got dict"),
        (lambda d: d.update(name=5), "graph JSON: document: 'name' must be str, got int"),
        (lambda d: d["fragments"].append(3), "graph JSON: fragment #1 must be an object, got int"),
        (lambda d: d["edges"][0].update(loop="yes"), "graph JSON: edge #0: 'loop' must be bool, got str"),
        (lambda d: d["edges"][0].update(max_staleness=1.5), "graph JSON: edge #0: 'max_staleness' must be int, got float"),
        (lambda d: d["edges"].append([1, 2]), "graph JSON: edge #3 must be an object, got list"),
        (lambda d: d.update(version="1"), "graph JSON: document: 'version' must be int, got str"),
    ],
)
def test_wrong_types(mutate, message):
    doc = _doc()
    mutate(doc)
    with pytest.raises(GraphError, match=message):
        _load(doc)


@pytest.mark.parametrize(
    "end",
    [["accumulate"], ["accumulate", "total", "x"], [3, "total"], ["accumulate", None], "accumulate.total"],
)
def test_bad_edge_end(end):
    doc = _doc()
    doc["edges"][0]["src"] = end
    expected_kind = "list" if isinstance(end, list) else None
    if expected_kind:
        with pytest.raises(GraphError, match=r"graph JSON: edge #0: 'src' must be \[fragment or null, port\], got "):
            _load(doc)
    else:
        with pytest.raises(GraphError, match="graph JSON: edge #0: 'src' must be list, got str"):
            _load(doc)


def test_bad_circuit_block():
    doc = json.loads(training_graph().to_json())
    circ = next(f for f in doc["fragments"] if f["name"] == "circuit")
    circ["circuit"]["observables"] = [[[1.0, "W0"]]]
    with pytest.raises(GraphError, match=r"graph JSON: fragment 'circuit': cannot read circuit: cannot parse Pauli term 'W0'"):
        _load(doc)
    doc = json.loads(training_graph().to_json())
    circ = next(f for f in doc["fragments"] if f["name"] == "circuit")
    del circ["circuit"]["ops"], circ["circuit"]["qpy"]  # a version-1 document without its QPY
    with pytest.raises(GraphError, match="graph JSON: fragment 'circuit' lacks 'qpy'"):
        _load(doc)
    circ["circuit"]["qpy"] = "not base64 at all!"
    with pytest.raises(GraphError, match="graph JSON: fragment 'circuit': cannot read circuit"):
        _load(doc)
    doc = json.loads(training_graph().to_json())
    circ = next(f for f in doc["fragments"] if f["name"] == "circuit")
    circ["circuit"]["ops"][0][2] = [["input", 0, "2", 0.0]]
    with pytest.raises(GraphError, match=r"op 0: an angle must be \[const\|input\|weight, index, scale, offset\]"):
        _load(doc)


def test_version_1_documents_are_read_from_their_qpy():
    doc = json.loads(training_graph().to_json())
    doc["version"] = 1
    for f in doc["fragments"]:
        if f.get("circuit"):
            del f["circuit"]["ops"]
    same_graph(_load(doc), training_graph())


def test_edge_to_missing_fragment_loads_but_does_not_validate():
    doc = _doc()
    doc["edges"].append({"src": ["accumulate", "norm"], "dst": ["vanished", "x"]})
    g = _load(doc)  # structure is fine
    assert g.edges[-1] == Edge(("accumulate", "norm"), ("vanished", "x"))
    with pytest.raises(GraphError, match="edge accumulate.norm -> vanished.x: unknown fragment 'vanished'"):
        g.validate()


def test_unknown_kind_loads_but_does_not_validate():
    doc = _doc()
    doc["fragments"][0]["kind"] = "magic"
    g = _load(doc)
    with pytest.raises(GraphError, match="unknown kind 'magic'"):
        g.validate()


# --- round trips ------------------------------------------------------------------


def test_json_document_shape():
    doc = json.loads(classical_graph().to_json())
    assert doc["format"] == "hqflow.graph" and doc["version"] == 2
    frag = doc["fragments"][0]
    assert frag["fn"] == f"{__name__}:accumulate"
    assert frag["params"] == {"decay": 0.5}
    assert doc["edges"][0]["loop"] is True and doc["edges"][0]["init"] == [0.0, 0.0, 0.0]
    assert json.loads(classical_graph().to_json(indent=None)) == doc


def test_round_trip_without_execute_fragments():
    g = classical_graph()
    g2 = Graph.from_json(g.to_json())
    same_graph(g, g2)
    assert g2.validate() is g2
    assert g2.edges[0].max_staleness == 2
    xs = [{"x": np.array([1.0, 2.0, 3.0]) * k} for k in range(5)]
    outputs_equal(hq.run(g, xs), hq.run(g2, xs))
    # and twice is a fixed point
    assert Graph.from_json(g2.to_json()).to_json() == g.to_json()


def test_round_trip_with_execute_fragment_exact():
    g = training_graph()
    text = g.to_json()
    g2 = Graph.from_json(text)
    same_graph(g, g2)
    assert g2.validate() is g2
    assert g2.fragment("circuit").circuit.fingerprint() == g.fragment("circuit").circuit.fingerprint()
    r1, r2 = hq.run(g, stream()), hq.run(g2, stream())
    outputs_equal(r1, r2)
    np.testing.assert_array_equal(r1.state["step.weights"], r2.state["step.weights"])
    # the QPY blob embeds fresh parameter UUIDs, so compare the reloaded graph, not the text
    same_graph(Graph.from_json(g2.to_json()), g)


def test_round_trip_with_shots_gives_identical_samples():
    g = training_graph(shots=300)
    g2 = Graph.from_json(g.to_json())
    same_graph(g, g2)
    g2.validate()
    outputs_equal(hq.run(g, stream(3), seed=11), hq.run(g2, stream(3), seed=11))


def test_round_trip_sampling_circuit():
    g = sampling_graph()
    g2 = Graph.from_json(g.to_json())
    same_graph(g, g2)
    items = [{"weights": np.array([a])} for a in (0.3, 1.5, 2.8)]
    r1, r2 = hq.run(g, items, seed=3), hq.run(g2, items, seed=3)
    outputs_equal(r1, r2)
    assert r1.column("counts")[0] == r2.column("counts")[0]


def test_round_trip_random_templates():
    rng = np.random.default_rng(12)
    for k in range(8):
        t = random_template(rng, 1 + k % 4)
        if k % 3 == 0:
            t = t.with_shots(64)
        pipe = hq.Pipeline(f"r{k}")
        pipe.input("inputs", "array").input("weights", "array")
        pipe.execute("exe", t, gradient=None if k % 2 else "param-shift")
        pipe.output("exe.values")
        g = pipe.build()
        g2 = Graph.from_json(g.to_json())
        same_graph(g, g2)
        item = {"inputs": rng.uniform(-2, 2, (2, t.n_inputs)), "weights": rng.uniform(-2, 2, t.n_weights)}
        outputs_equal(hq.run(g, [item]), hq.run(g2, [item]))


def test_fragment_with_no_circuit_and_default_fields():
    frag = Classical("f", "preprocess", (Port("x"),), (Port("y", "dict"),), resource="gpu", fn=f"{__name__}:encode",
                     params=(("scale", [1, 2]),))
    g = Graph("d", (frag,), (Edge((None, "x"), ("f", "x")), Edge(("f", "y"), (None, "y"))), (Port("x"),), (Port("y", "dict"),))
    same_graph(g, Graph.from_json(g.to_json()))


def double_w(w):
    return w * 2


def test_tuple_init_and_params_round_trip():
    pipe = hq.Pipeline("tuples")
    pipe.learn(double_w, outputs={"w": "array"}, inputs={"w": "array"})
    pipe.loop("double_w.w", "double_w.w", init=(1.0, 2.0))
    pipe.output("double_w.w")
    g = pipe.build()
    g2 = Graph.from_json(g.to_json())
    r1, r2 = hq.run(g, 2), hq.run(g2, 2)
    np.testing.assert_array_equal(np.asarray(r1.column("w")[1]), np.asarray(r2.column("w")[1]))
    same_graph(g, g2)


# --- hostile values: numbers no float holds, text no output can write ----------------------------

HUGE = [10**400, -(10**400), int("9" * 309)]


def _numbers(doc, path=()):
    """Paths to every number in a document (bools aside)."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _numbers(v, path + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _numbers(v, path + (i,))
    elif isinstance(doc, (int, float)) and not isinstance(doc, bool):
        yield path


def _strings(doc, path=()):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _strings(v, path + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _strings(v, path + (i,))
    elif isinstance(doc, str):
        yield path


def _with(doc, path, value):
    doc = json.loads(json.dumps(doc))
    node = doc
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    return json.dumps(doc)


def _one_clean_line(exc) -> str:
    text = str(exc)
    assert "\n" not in text
    text.encode("utf-8")  # printable: no lone surrogate
    return text


@pytest.mark.parametrize("huge", HUGE, ids=["1e400", "-1e400", "309 nines"])
def test_a_number_too_large_for_a_float_anywhere_is_one_clear_error(huge):
    doc = json.loads(training_graph().to_json())
    paths = list(_numbers(doc))
    assert len(paths) > 20
    for path in paths:
        with pytest.raises(GraphError) as err:
            Graph.from_json(_with(doc, path, huge))
        assert "digits is out of range" in _one_clean_line(err.value), path


def test_an_angle_offset_of_80_digits_is_read_as_the_float_it_is():
    doc = json.loads(training_graph().to_json())
    doc["fragments"][1]["circuit"]["ops"][0][2][0][3] = -(10**79)
    graph = Graph.from_json(json.dumps(doc))
    assert graph.fragments[1].circuit.ops[0].angles[0].offset == -1e79


@pytest.mark.parametrize("bad", ["\ud800", "a\udcffb"])
def test_text_with_a_lone_surrogate_anywhere_is_one_clear_error(bad):
    doc = json.loads(training_graph().to_json())
    paths = [p for p in _strings(doc) if p[-1] != "qpy"]
    assert len(paths) > 20
    for path in paths:
        with pytest.raises(GraphError) as err:
            Graph.from_json(_with(doc, path, bad))
        assert "lone surrogate" in _one_clean_line(err.value), path


def test_a_graph_built_with_a_lone_surrogate_in_a_name_does_not_validate():
    pipe = hq.Pipeline("p\ud800")
    pipe.input("x", "array")
    pipe.preprocess(encode, name="enc\udcff", params={"scale": 1.0}, outputs={"out": "array"})
    pipe.connect("input.x", "enc\udcff.batch")
    with pytest.raises(GraphError) as err:
        pipe.build()
    text = _one_clean_line(err.value)
    assert "graph name 'p\\ud800' is not Unicode text" in text and "fragment name 'enc\\udcff'" in text


@pytest.mark.parametrize("mutate, words", [
    (lambda d: d["fragments"][0].__setitem__("name", "\ud800"), "lone surrogate"),
    (lambda d: d["edges"][0].__setitem__("max_staleness", 10**400), "digits is out of range"),
])
def test_hqflow_inspect_says_so_in_one_line(mutate, words, tmp_path, capsys):
    from hqflow.cli import main

    doc = json.loads(training_graph().to_json())
    mutate(doc)
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc))
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and words in err, err


# --- SPSA settings (issue 25) ------------------------------------------------------


def spsa_graph(settings=(4, 0.1)) -> Graph:
    c = Circuit(2, name="tiny")
    x, w = c.inputs("x", 2), c.weights("w", 3)
    c.ry(x[0], 0).ry(x[1], 1).cz(0, 1).ry(w[0], 0).rx(w[1], 1).ry(w[2], 1)
    pipe = hq.Pipeline("tiny")
    pipe.input("batch", "array").input("target", "array")
    pipe.prepare(encode, outputs={"angles": "array"}, params={"scale": np.pi})
    pipe.execute("circuit", c.build(observables=["Z0 Z1"]), gradient="spsa", spsa=settings)
    pipe.connect("encode.angles", "circuit.inputs")
    pipe.learn(step, outputs={"weights": "array", "loss": "scalar"}, params={"lr": 0.3})
    pipe.loop("step.weights", ["circuit.weights", "step.weights"], init=[0.1, 0.2, -0.3])
    pipe.output("step.loss")
    return pipe.build()


def test_round_trip_with_spsa_settings():
    g = spsa_graph()
    doc = json.loads(g.to_json())
    frag = next(f for f in doc["fragments"] if f["kind"] == "execute")
    assert frag["gradient"] == "spsa" and frag["spsa"] == [4, 0.1]
    g2 = Graph.from_json(g.to_json())
    same_graph(g, g2)
    assert g2.validate() is g2 and g2.fragment("circuit").spsa == (4, 0.1)
    outputs_equal(hq.run(g, stream(3), seed=5), hq.run(g2, stream(3), seed=5))


def test_spsa_key_is_written_only_when_set_and_older_documents_load():
    for g in (training_graph(), spsa_graph(None)):
        doc = json.loads(g.to_json())
        assert all("spsa" not in f for f in doc["fragments"])
        g2 = Graph.from_json(json.dumps(doc))
        same_graph(g, g2)
        assert g2.fragment("circuit").spsa is None


@pytest.mark.parametrize("value, message", [
    ("4,0.1", "'spsa' must be list/NoneType, got str"),
    ([4], r"spsa must be \(samples, epsilon\), got \(4,\)"),
    ([0, 0.1], "spsa samples must be an integer from 1 to 1000, got 0"),
    ([4.5, 0.1], "spsa samples must be an integer"),
    ([4, 0], r"spsa epsilon must be a number in \(0, 3.2\], got 0"),
    ([4, "0.1"], "spsa epsilon must be a number"),
])
def test_bad_spsa_settings_in_a_document_are_one_line_errors(value, message):
    doc = json.loads(spsa_graph().to_json())
    next(f for f in doc["fragments"] if f["kind"] == "execute")["spsa"] = value
    with pytest.raises(GraphError, match=message) as err:
        Graph.from_json(json.dumps(doc))
    assert "\n" not in str(err.value)


def test_spsa_settings_belong_to_an_spsa_execute_fragment():
    doc = json.loads(training_graph().to_json())
    next(f for f in doc["fragments"] if f["kind"] == "execute")["spsa"] = [4, 0.1]
    with pytest.raises(GraphError, match="spsa settings .* are for gradient='spsa', not 'param-shift'"):
        Graph.from_json(json.dumps(doc))
    doc = json.loads(training_graph().to_json())
    next(f for f in doc["fragments"] if f["kind"] == "learn")["spsa"] = [4, 0.1]
    with pytest.raises(GraphError, match="a learn fragment holds no 'spsa'"):
        Graph.from_json(json.dumps(doc))
