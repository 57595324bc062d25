"""Graph validation (one test per message), Pipeline building, printing and drawing."""
import dataclasses
import re

import numpy as np
import pytest

import hqflow as hq
from hqflow.backends import Capabilities, get_backend
from hqflow.ir import Angle, Circuit, CircuitCall, Classical, Edge, Graph, GraphError, Observable, Op, Port, execute_ports
from hqflow.ir.graph import fn_ref, resolve_fn, types_compatible


# --- module-level fragment functions ----------------------------------------------


def double(x):
    return 2 * x


def encode(x):
    return np.pi * np.asarray(x)


def loss(values):
    return float(np.mean(values))


def update(weights, loss, lr=0.1):
    return np.asarray(weights) - lr * loss


def ident(x):
    return x


NOT_CALLABLE = 42


def _template(n_qubits=2, observables=("Z0 Z1",), shots=None):
    c = Circuit(n_qubits, name="circ")
    x = c.inputs("x", 2)
    w = c.weights("w", 2)
    c.ry(x[0], 0).ry(x[1], 1).cz(0, 1).rx(w[0], 0).rx(w[1], n_qubits - 1)
    return c.build(observables=list(observables), shots=shots)


def _frag(name, fn, ins=(), outs=(), kind="preprocess", **kw):
    return Classical(
        name, kind, tuple(Port(*p) if isinstance(p, tuple) else Port(p) for p in ins),
        tuple(Port(*p) if isinstance(p, tuple) else Port(p) for p in outs), fn=fn_ref(fn, name), **kw,
    )


def _exe(name="exe", template=None, gradient=None, backend="reference"):
    t = template or _template()
    ins, outs = execute_ports(t, gradient)
    return CircuitCall(name, "execute", ins, outs, circuit=t, backend=backend, gradient=gradient)


def good_graph() -> Graph:
    """input x -> enc -> exe (weights loop-carried from upd) -> loss -> upd; output loss."""
    frags = (
        _frag("enc", encode, ["x"], [("angles", "array")], kind="prepare"),
        _exe(),
        _frag("loss", loss, ["values"], [("loss", "scalar")], kind="postprocess"),
        _frag("upd", update, ["weights", "loss"], [("weights", "array")], kind="learn", params=(("lr", 0.5),)),
    )
    edges = (
        Edge((None, "x"), ("enc", "x")),
        Edge(("enc", "angles"), ("exe", "inputs")),
        Edge(("upd", "weights"), ("exe", "weights"), loop=True, init=[0.0, 0.0]),
        Edge(("exe", "values"), ("loss", "values")),
        Edge(("upd", "weights"), ("upd", "weights"), loop=True, init=[0.0, 0.0]),
        Edge(("loss", "loss"), ("upd", "loss")),
        Edge(("loss", "loss"), (None, "loss")),
    )
    return Graph("g", frags, edges, (Port("x", "array"),), (Port("loss", "scalar"),))


def replace_fragment(g: Graph, frag_name: str, **changes) -> Graph:
    frags = tuple(dataclasses.replace(f, **changes) if f.name == frag_name else f for f in g.fragments)
    return dataclasses.replace(g, fragments=frags)


def errors(g: Graph, **kw) -> list[str]:
    with pytest.raises(GraphError) as info:
        g.validate(**kw)
    problems = info.value.problems
    assert str(info.value) == (problems[0] if len(problems) == 1 else f"{len(problems)} problems: " + "; ".join(problems))
    assert "\n" not in str(info.value)
    return info.value.problems


def one_error(g: Graph, **kw) -> str:
    probs = errors(g, **kw)
    assert len(probs) == 1, probs
    return probs[0]


def test_good_graph_is_valid():
    g = good_graph()
    assert g.validate() is g
    assert g.validate(backends={"reference": Capabilities("reference", max_qubits=2)}) is g
    assert g.validate(resolve=False) is g


# --- every validation message --------------------------------------------------


def test_unknown_fragment_in_edge():
    g = good_graph()
    g = dataclasses.replace(g, edges=g.edges + (Edge(("ghost", "out"), ("loss", "values")),))
    probs = errors(g)
    assert "edge ghost.out -> loss.values: unknown fragment 'ghost'" in probs


def test_unknown_destination_fragment():
    g = good_graph()
    g = dataclasses.replace(g, edges=g.edges + (Edge(("enc", "angles"), ("nowhere", "in")),))
    assert one_error(g) == "edge enc.angles -> nowhere.in: unknown fragment 'nowhere'"


def test_unknown_port_lists_the_fragments_ports():
    g = good_graph()
    edges = tuple(Edge(("enc", "angle"), e.dst) if e.src == ("enc", "angles") else e for e in g.edges)
    probs = errors(dataclasses.replace(g, edges=edges))
    assert "edge enc.angle -> exe.inputs: fragment 'enc' has no output port 'angle' (its outputs: angles)" in probs
    assert "fragment 'exe': input port 'inputs' is not connected" in probs
    # and for an input port
    edges = tuple(Edge(e.src, ("upd", "los")) if e.dst == ("upd", "loss") else e for e in good_graph().edges)
    probs = errors(dataclasses.replace(g, edges=edges))
    assert "edge loss.loss -> upd.los: fragment 'upd' has no input port 'los' (its inputs: weights, loss)" in probs


def test_unknown_port_on_fragment_without_ports():
    g = good_graph()
    frag = _frag("src", ident, [], [])
    g = dataclasses.replace(g, fragments=g.fragments + (frag,), edges=g.edges + (Edge(("src", "y"), ("loss", "values")),))
    assert "edge src.y -> loss.values: fragment 'src' has no output port 'y' (its outputs: none)" in errors(g)


def test_unconnected_input_port():
    g = good_graph()
    edges = tuple(e for e in g.edges if e.dst != ("upd", "loss"))
    assert one_error(dataclasses.replace(g, edges=edges)) == "fragment 'upd': input port 'loss' is not connected"


def test_input_fed_twice():
    g = good_graph()
    g = dataclasses.replace(g, edges=g.edges + (Edge(("exe", "values"), ("loss", "values")),))
    assert one_error(g) == "fragment 'loss': input port 'values' is fed by 2 edges"


def test_type_mismatch():
    g = replace_fragment(good_graph(), "loss", inputs=(Port("values", "scalar"),))
    assert one_error(g) == "edge exe.values -> loss.values: type mismatch, array output into scalar input"


@pytest.mark.parametrize(
    "src, dst, ok",
    [
        ("array", "tensor", True), ("tensor", "array", True), ("any", "scalar", True), ("dict", "any", True),
        ("int", "int", True), ("scalar", "array", False), ("int", "scalar", False), ("list", "array", False),
    ],
)
def test_type_compatibility(src, dst, ok):
    assert types_compatible(src, dst) is ok
    g = replace_fragment(good_graph(), "enc", outputs=(Port("angles", src),))
    g = replace_fragment(g, "exe", inputs=(Port("inputs", dst), Port("weights", "array")))
    try:
        g.validate()
        probs = []
    except GraphError as exc:
        probs = exc.problems
    mismatch = [p for p in probs if "type mismatch" in p]
    assert bool(mismatch) is (not ok)
    if not ok:
        assert mismatch == [f"edge enc.angles -> exe.inputs: type mismatch, {src} output into {dst} input"]


def test_cycle_without_loop_edge_names_the_cycle():
    g = good_graph()
    edges = tuple(dataclasses.replace(e, loop=False, init=None) if e.src == ("upd", "weights") and e.dst[0] == "exe" else e for e in g.edges)
    msg = one_error(dataclasses.replace(g, edges=edges))
    assert msg.startswith("cycle ")
    assert "has no loop-carried edge; declare the edge that feeds back as loop-carried" in msg
    path = msg[len("cycle "): msg.index(" has no")].split(" -> ")
    assert path[0] == path[-1]
    assert set(path) == {"exe", "loss", "upd"}
    with pytest.raises(GraphError, match="cycle .* has no loop-carried edge"):
        dataclasses.replace(g, edges=edges).topological_order()


def test_self_cycle():
    frag = _frag("f", ident, ["x"], ["x"])
    g = Graph("self", (frag,), (Edge(("f", "x"), ("f", "x")),))
    assert one_error(g).startswith("cycle f -> f has no loop-carried edge")


def test_loop_edge_negative_staleness():
    g = good_graph()
    edges = tuple(dataclasses.replace(e, max_staleness=-1) if e.loop and e.dst[0] == "exe" else e for e in g.edges)
    assert one_error(dataclasses.replace(g, edges=edges)) == (
        "edge upd.weights ~> exe.weights  (loop-carried, max_staleness=-1): max_staleness must be an integer >= 0, got -1"
    )


def test_loop_edge_must_join_fragments():
    g = good_graph()
    g = dataclasses.replace(
        g, outputs=g.outputs + (Port("w"),), edges=g.edges + (Edge(("upd", "weights"), (None, "w"), loop=True, init=[0, 0]),)
    )
    assert one_error(g).endswith("a loop-carried edge must join two fragments")


def test_graph_output_fed_by_no_edge():
    g = good_graph()
    g = dataclasses.replace(g, outputs=g.outputs + (Port("extra"),))
    assert one_error(g) == "graph output 'extra' is fed by 0 edges (needs exactly 1)"


def test_graph_output_fed_twice():
    g = good_graph()
    g = dataclasses.replace(g, edges=g.edges + (Edge(("loss", "loss"), (None, "loss")),))
    assert one_error(g) == "graph output 'loss' is fed by 2 edges (needs exactly 1)"


def test_edge_to_undeclared_graph_ports():
    g = good_graph()
    g = dataclasses.replace(g, edges=g.edges + (Edge(("loss", "loss"), (None, "nope")), Edge((None, "q"), ("enc", "x"))))
    probs = errors(g)
    assert "edge loss.loss -> output.nope: the graph has no output 'nope'" in probs
    assert "edge input.q -> enc.x: the graph has no input 'q'" in probs


def test_unused_graph_input():
    g = good_graph()
    g = dataclasses.replace(g, inputs=g.inputs + (Port("y", "array"),))
    assert one_error(g) == "graph input 'y' is not connected to any fragment"


def test_unknown_kind():
    g = replace_fragment(good_graph(), "loss", kind="postprocessing")
    assert one_error(g) == (
        "fragment 'loss': unknown kind 'postprocessing'; kinds are preprocess, prepare, execute, postprocess, learn"
    )


def test_unknown_resource():
    g = replace_fragment(good_graph(), "loss", resource="tpu")
    assert one_error(g) == "fragment 'loss': unknown resource 'tpu'; resources are cpu, gpu, qpu"


def test_unknown_port_type():
    g = replace_fragment(good_graph(), "loss", outputs=(Port("loss", "float"),))
    probs = errors(g)
    assert probs[0].startswith("fragment 'loss': port 'loss' has unknown type 'float'; known: any, array, tensor, scalar")
    assert probs[1:] == ["edge loss.loss -> output.loss: type mismatch, float output into scalar input"]
    g = dataclasses.replace(good_graph(), inputs=(Port("x", "matrix"),))
    assert errors(g)[0].startswith("graph port 'x' has unknown type 'matrix'; known: any, array")


def test_duplicate_ports():
    g = replace_fragment(good_graph(), "loss", outputs=(Port("loss", "scalar"), Port("loss", "scalar")))
    assert one_error(g) == "fragment 'loss': duplicate output port(s) ['loss']"


def test_bad_fragment_names():
    g = replace_fragment(good_graph(), "loss", name="lo.ss")
    assert "fragment 'lo.ss': names must be non-empty and contain no '.'" in errors(g)


def test_non_execute_without_fn():
    g = replace_fragment(good_graph(), "loss", fn=None)
    assert one_error(g) == "fragment 'loss': a postprocess fragment needs a function"


@pytest.mark.parametrize(
    "ref, message",
    [
        ("no_such_module_xyz:f", "fragment 'loss': cannot import function 'no_such_module_xyz:f': No module named 'no_such_module_xyz'"),
        ("numpy:no_such_function", "fragment 'loss': cannot import function 'numpy:no_such_function': module 'numpy' has no attribute"),
        ("numpy.linalg", "fragment 'loss': function reference 'numpy.linalg' is not of the form 'module:qualname'"),
        (f"{__name__}:NOT_CALLABLE", f"fragment 'loss': '{__name__}:NOT_CALLABLE' is not callable"),
    ],
)
def test_unimportable_fn(ref, message):
    g = replace_fragment(good_graph(), "loss", fn=ref)
    assert one_error(g).startswith(message)
    # resolve=False skips the import
    assert g.validate(resolve=False) is g


def test_resolve_fn_imports_nested_names():
    assert resolve_fn("numpy.linalg:norm") is np.linalg.norm
    assert resolve_fn("os.path:join") is __import__("os").path.join


def test_execute_without_circuit():
    g = replace_fragment(good_graph(), "exe", circuit=None)
    assert one_error(g) == "fragment 'exe': an execute fragment needs a circuit template"


def test_circuit_problems_surface():
    t = _template()
    bad = dataclasses.replace(t, ops=t.ops + (Op("rx", (0,), (Angle.weight(5),)),), input_names=t.input_names + ("unused",))
    g = replace_fragment(good_graph(), "exe", circuit=bad, inputs=execute_ports(bad, None)[0])
    probs = errors(g)
    assert "fragment 'exe': circuit 'circ', op 5 (rx): unbound parameter (weight #5) is not declared" in probs
    assert "fragment 'exe': circuit 'circ': extra input parameter(s) ['unused'] not used by any gate" in probs


def test_observable_on_missing_qubit_surfaces():
    t = _template()
    bad = dataclasses.replace(t, observables=(Observable.coerce("Z0 Z4"),))
    g = replace_fragment(good_graph(), "exe", circuit=bad)
    assert one_error(g) == (
        "fragment 'exe': circuit 'circ': observable 0 (+1*Z0 Z4) acts on qubit(s) [4] but the circuit has only 2 qubits"
    )


def test_execute_ports_not_matching_circuit():
    g = replace_fragment(good_graph(), "exe", outputs=(Port("values", "array"), Port("jacobian", "array")))
    assert one_error(g) == (
        "fragment 'exe': ports (inputs: array, weights: array) -> (values: array, jacobian: array) do not match its "
        "circuit, which needs (inputs: array, weights: array) -> (values: array)"
    )


def test_circuit_wider_than_backend():
    g = replace_fragment(good_graph(), "exe", circuit=_template(3))
    msg = "fragment 'exe': circuit 'circ' has 3 qubits but backend 'reference' allows at most 2"
    assert one_error(g, backends={"reference": Capabilities("reference", max_qubits=2)}) == msg
    assert one_error(g, backends={"reference": get_backend("reference", max_qubits=2).capabilities}) == msg
    assert g.validate() is g  # nothing checked against a backend without backends=


def test_unknown_backend_name():
    """A name that is not a registered backend is a pool name: bound (and checked) when the graph runs."""
    from hqflow.ir.validate import problems
    from hqflow.pipeline import registry_backends

    g = replace_fragment(good_graph(), "exe", backend="warp-drive")
    assert problems(g) == [] and problems(g, registry_backends(g)) == []
    assert one_error(g, backends={"reference": Capabilities("reference", 5)}) == (
        "fragment 'exe': backend 'warp-drive' is not among the backends given"
    )
    bad = replace_fragment(good_graph(), "exe", backend="pennylane:warp-drive")  # a registered prefix: checked
    with pytest.raises(GraphError, match="warp-drive"):
        registry_backends(bad)


def test_the_ir_asks_no_backend_registry():
    """Layering (DESIGN.md): validation checks backends only against what it is given."""
    import hqflow.ir.validate as validate

    g = replace_fragment(good_graph(), "exe", circuit=_template(30))  # wider than the registry's reference
    assert validate.problems(g) == []
    assert not hasattr(validate, "set_backend_lookup")
    with pytest.raises(GraphError, match="has 30 qubits but backend 'reference' allows at most 20"):
        from hqflow.pipeline import registry_backends

        g.validate(registry_backends(g))


def test_execute_without_backend():
    g = replace_fragment(good_graph(), "exe", backend=None)
    assert one_error(g) == "fragment 'exe': an execute fragment needs a backend name"


def test_gradient_without_observables():
    t = _template(observables=())
    ins, outs = execute_ports(t, "param-shift")
    assert [p.name for p in outs] == ["probs", "jacobian"]
    frags = (
        _frag("enc", encode, ["x"], [("angles", "array")], kind="prepare"),
        CircuitCall("exe", "execute", ins, outs, circuit=t, backend="reference", gradient="param-shift"),
    )
    edges = (
        Edge((None, "x"), ("enc", "x")),
        Edge(("enc", "angles"), ("exe", "inputs")),
        Edge((None, "w"), ("exe", "weights")),
        Edge(("exe", "probs"), (None, "probs")),
    )
    g = Graph("sampler", frags, edges, (Port("x", "array"), Port("w", "array")), (Port("probs", "array"),))
    assert one_error(g) == "fragment 'exe': gradients need observables; the circuit only samples"


def test_unknown_gradient_method():
    g = replace_fragment(good_graph(), "exe", gradient="adjoint")
    probs = errors(g)
    assert "fragment 'exe': unknown gradient method 'adjoint'; use None or 'param-shift'" in probs


def test_duplicate_fragment_names():
    g = good_graph()
    g = dataclasses.replace(g, fragments=g.fragments + (_frag("loss", loss, [], [], kind="postprocess"),))
    assert "fragment name 'loss' is used 2 times" in errors(g)


def test_all_problems_reported_together():
    g = replace_fragment(good_graph(), "loss", resource="tpu", fn=None)
    g = dataclasses.replace(g, outputs=g.outputs + (Port("extra"),))
    probs = errors(g)
    assert len(probs) == 3


# --- graph helpers ---------------------------------------------------------------


def test_fragment_lookup():
    g = good_graph()
    assert g.fragment("exe").kind == "execute"
    with pytest.raises(GraphError, match="graph 'g' has no fragment 'zzz'"):
        g.fragment("zzz")
    assert [e.dst for e in g.loop_edges] == [("exe", "weights"), ("upd", "weights")]


def test_topological_order():
    g = good_graph()
    assert [f.name for f in g.topological_order()] == ["enc", "exe", "loss", "upd"]
    # declaration order does not matter, edges do
    rev = dataclasses.replace(g, fragments=tuple(reversed(g.fragments)))
    assert [f.name for f in rev.topological_order()] == ["enc", "exe", "loss", "upd"]
    # independent fragments keep declaration order
    a, b = _frag("a", ident, [], ["x"]), _frag("b", ident, [], ["x"])
    assert [f.name for f in Graph("i", (b, a), ()).topological_order()] == ["b", "a"]


def test_print_graph():
    text = str(good_graph())
    assert text.splitlines()[0] == "Graph 'g': 4 fragments, 7 edges (2 loop-carried)"
    assert "inputs:  x: array" in text
    assert "outputs: loss: scalar" in text
    for kind, name in [("prepare", "enc"), ("execute", "exe"), ("postprocess", "loss"), ("learn", "upd")]:
        assert re.search(rf"\[{kind}\s*\] {name}\b", text), (kind, name)
    assert "@qpu" in text and "@cpu" in text
    assert "backend=reference, circuit 'circ' 2q/5 ops, 2 inputs, 2 weights, 1 observables, exact" in text
    assert f"fn={__name__}:update params={{'lr': 0.5}}" in text
    assert "enc.angles -> exe.inputs" in text
    assert "input.x -> enc.x" in text
    assert "loss.loss -> output.loss" in text
    assert "upd.weights ~> exe.weights  (loop-carried, max_staleness=0)" in text


def test_to_networkx():
    g = good_graph()
    nxg = g.to_networkx()
    assert nxg.number_of_nodes() == 4 + 1 + 1
    assert nxg.number_of_edges() == 7
    assert set(nxg.nodes) == {"enc", "exe", "loss", "upd", "input:x", "output:loss"}
    assert nxg.nodes["exe"]["resource"] == "qpu" and nxg.nodes["exe"]["backend"] == "reference"
    assert nxg.nodes["input:x"]["kind"] == "input"
    loops = [(u, v) for u, v, d in nxg.edges(data=True) if d["loop"]]
    assert sorted(loops) == [("upd", "exe"), ("upd", "upd")]
    data = nxg.get_edge_data("enc", "exe")[0]
    assert (data["src_port"], data["dst_port"], data["loop"]) == ("angles", "inputs", False)


def test_draw_png(tmp_path):
    path = tmp_path / "graph.png"
    assert good_graph().draw(str(path)) == str(path)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 1000


# --- fn_ref ------------------------------------------------------------------------


def test_fn_ref_module_level():
    assert fn_ref(double) == f"{__name__}:double"
    assert resolve_fn(fn_ref(double)) is double


def test_fn_ref_refuses_lambda_and_closure():
    with pytest.raises(GraphError, match=r"fragment 'f': function '\S*<lambda>' is a closure or lambda and cannot be held by reference; define it at module level"):
        fn_ref(lambda x: x, "f")

    def inner(x):
        return x

    with pytest.raises(GraphError, match=r"function 'test_fn_ref_refuses_lambda_and_closure.<locals>.inner' is a closure or lambda"):
        fn_ref(inner, "g")


# --- Pipeline ---------------------------------------------------------------------


def test_pipeline_autowiring():
    pipe = hq.Pipeline("auto")
    pipe.input("x", "array")
    pipe.preprocess(double, outputs={"y": "array"})  # x <- graph input by name
    pipe.postprocess(ident, name="copy", outputs="z")  # port x <- graph input x too
    pipe.preprocess(encode, name="enc2", outputs="angles")  # x <- graph input
    pipe.postprocess(loss, outputs="loss")  # 'values' is nobody's output: stays unconnected
    g = pipe.build(validate=False)
    edges = {(e.src, e.dst) for e in g.edges}
    assert ((None, "x"), ("double", "x")) in edges
    assert ((None, "x"), ("copy", "x")) in edges
    assert not any(e.dst == ("loss", "values") for e in g.edges)
    with pytest.raises(GraphError, match="fragment 'loss': input port 'values' is not connected"):
        pipe.build()


def test_pipeline_autowires_unique_earlier_output():
    pipe = hq.Pipeline("auto2")
    pipe.input("data", "array")
    pipe.preprocess(ident, name="first", outputs="x")
    pipe.connect("input.data", "first.x")
    pipe.postprocess(double, outputs="values")  # x <- first.x (unique earlier output)
    pipe.postprocess(loss, outputs="loss")  # values <- double.values
    pipe.output("loss.loss")
    g = pipe.build()
    edges = {(e.src, e.dst) for e in g.edges}
    assert (("first", "x"), ("double", "x")) in edges
    assert (("double", "values"), ("loss", "values")) in edges
    assert g.outputs == (Port("loss"),)
    np.testing.assert_allclose(hq.run(g, [{"data": np.array([1.0, 3.0])}]).outputs[0]["loss"], 4.0)


def test_pipeline_does_not_autowire_ambiguous_or_later_outputs():
    pipe = hq.Pipeline("amb")
    pipe.preprocess(ident, name="a", outputs="x", inputs=None)
    pipe.preprocess(ident, name="b", outputs="x")
    pipe.postprocess(double, outputs="y")  # x: two earlier sources -> not wired
    pipe.connect("input.data", "a.x")
    pipe.connect("input.data", "b.x")
    pipe.input("data")
    probs = errors(pipe.build(validate=False))
    assert "fragment 'double': input port 'x' is not connected" in probs
    # a later fragment's output is not used
    pipe = hq.Pipeline("later")
    pipe.postprocess(double, outputs="y")
    pipe.preprocess(ident, name="src", outputs="x")
    g = pipe.build(validate=False)
    assert not any(e.dst == ("double", "x") for e in g.edges)


def test_pipeline_decorator_inputs_and_params():
    pipe = hq.Pipeline("deco")
    pipe.input("weights", "array").input("loss", "scalar")
    deco = pipe.learn(outputs={"weights": "array"}, inputs={"loss": "scalar", "weights": "array"}, params={"lr": np.float64(0.25)})
    assert deco(update) is update
    f = pipe.build().fragment("update")
    assert f.inputs == (Port("weights", "array"), Port("loss", "scalar"))  # 'lr' is a constant, not a port
    assert f.kwargs == {"lr": 0.25} and isinstance(f.kwargs["lr"], float)
    assert f.resource == "cpu" and f.kind == "learn"


def test_pipeline_decorator_inputs_naming_non_parameter():
    pipe = hq.Pipeline("typo")
    with pytest.raises(GraphError, match=r"fragment 'update': inputs= names \['los'\], which are not parameters of update"):
        pipe.learn(update, inputs={"los": "scalar"})


def test_pipeline_decorator_refuses_closure():
    pipe = hq.Pipeline("closure")

    with pytest.raises(GraphError, match="is a closure or lambda"):

        @pipe.preprocess(outputs="y")
        def local(x):
            return x


def test_pipeline_params_must_be_json():
    pipe = hq.Pipeline("json")
    with pytest.raises(GraphError, match=r"param 'lr' of fragment 'update' must be JSON data .*got object"):
        pipe.learn(update, params={"lr": object()})


def test_pipeline_execute_requires_template():
    with pytest.raises(GraphError, match="fragment 'q': circuit must be a CircuitTemplate .* got str"):
        hq.Pipeline("x").execute("q", "not a circuit")


def test_pipeline_bad_port_reference():
    with pytest.raises(GraphError, match="'nodot' is not of the form 'fragment.port'"):
        hq.Pipeline("x").connect("nodot", "a.b")


def test_pipeline_loop_to_several_destinations_and_array_init():
    pipe = hq.Pipeline("loops")
    pipe.input("x", "array")
    pipe.prepare(encode, outputs={"angles": "array"})
    pipe.execute("circuit", _template(), gradient="param-shift")
    pipe.connect("encode.angles", "circuit.inputs")
    pipe.postprocess(loss, outputs={"loss": "scalar"})
    pipe.learn(update, outputs={"weights": "array"}, params={"lr": 0.1})
    pipe.loop("update.weights", ["circuit.weights", "update.weights"], init=np.array([0.5, -0.5]), max_staleness=1)
    pipe.output("loss.loss")
    g = pipe.build()
    loops = g.loop_edges
    assert [e.dst for e in loops] == [("circuit", "weights"), ("update", "weights")]
    assert all(e.init == [0.5, -0.5] and e.max_staleness == 1 for e in loops)
    assert g.fragment("circuit").resource == "qpu"
    assert [p.name for p in g.fragment("circuit").outputs] == ["values", "jacobian"]


def _with_default(x, beta=0.9):
    return x * beta


def test_parameters_with_defaults_are_not_ports_unless_named():
    pipe = hq.Pipeline("defaults")
    pipe.input("x")
    pipe.preprocess(_with_default, outputs="y")
    assert [p.name for p in pipe.build().fragment("_with_default").inputs] == ["x"]
    pipe2 = hq.Pipeline("defaults2")
    pipe2.input("x").input("beta")
    pipe2.preprocess(_with_default, outputs="y", inputs={"beta": "scalar"})
    assert [p.name for p in pipe2.build().fragment("_with_default").inputs] == ["x", "beta"]


def test_negative_scale_fingerprint_survives_qpy_round_trip():
    pytest.importorskip("qiskit")
    from hqflow.ir.qiskit_io import template_from_qpy, template_to_qpy

    c = Circuit(1)
    (w,) = c.weights("w", 1)
    t = c.rz(-1 * w, 0).build(observables=["Z0"])
    t2 = template_from_qpy(template_to_qpy(t), t.input_names, t.weight_names, t.observables, t.shots, t.name)
    assert t2 == t and t2.fingerprint() == t.fingerprint()


@pytest.mark.parametrize("ref", [".x:f", "..:f", ".:f"])
def test_relative_function_references_are_graph_errors(ref):
    from hqflow.ir.graph import resolve_fn

    with pytest.raises(GraphError, match="an absolute module"):
        resolve_fn(ref)
