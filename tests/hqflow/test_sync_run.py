"""``hq.run(..., executor="sync")``, one thing at a time: steps, loop-carried state, spans, errors, return
conventions, backends and seeds; and the sync and local executors equal a plain loop (``plain_loop``)."""
import re

import numpy as np
import pytest

import hqflow as hq
from hqflow.backends import BackendError, CircuitBatch
from hqflow.backends.reference import ReferenceBackend
from hqflow.engine.fragments import FragmentError
from hqflow.ir import Circuit, GraphError

def run_sync(graph, stream, **kw):
    return hq.run(graph, stream, executor="sync", **kw)


# --- module-level fragment functions ----------------------------------------------


def count(n):
    return n + 1


def scaled(x, k):
    return k * np.asarray(x)


def two_dict(x):
    return {"b": 2 * x, "a": x}


def two_tuple(x):
    return x, 3 * x


def one(x):
    return x + 1


def summed(a, b, c, d, e):
    return a + b + c + d + e


def bad_keys(x):
    return {"a": x, "c": x}


def short_tuple(x):
    return (x,)


def as_list(x):
    return [x, x]


def single_dict_wrong_key(x):
    return {"value": x}


def boom(x):
    if x > 2:
        raise ValueError(f"bad x {x}")
    return x


def encode(batch):
    return np.pi * np.asarray(batch)


def train_step(values, jacobian, weights, target, lr):
    err = values[:, 0] - np.asarray(target)
    grad = (2 * err[:, None] * jacobian[:, 0, :]).mean(0)
    return {"weights": np.asarray(weights) - lr * grad, "loss": float((err**2).mean())}


def check_array(w):
    assert isinstance(w, np.ndarray), type(w)
    return w * 2


def _tiny_template(shots=None):
    c = Circuit(2, name="tiny")
    x = c.inputs("x", 2)
    w = c.weights("w", 2)
    c.ry(x[0], 0).ry(x[1], 1).cz(0, 1).ry(w[0], 0).ry(w[1], 1)
    return c.build(observables=["Z0 Z1"], shots=shots)


def counter_graph(init=0):
    pipe = hq.Pipeline("counter")
    pipe.preprocess(count, outputs="n")
    pipe.loop("count.n", "count.n", **({} if init == "missing" else {"init": init}))
    pipe.output("count.n")
    return pipe.build()


def training_graph(lr=0.5, init=(0.1, 0.2)):
    pipe = hq.Pipeline("tiny")
    pipe.input("batch", "array").input("target", "array")
    pipe.prepare(encode, outputs={"angles": "array"})
    pipe.execute("circuit", _tiny_template(), backend="reference", gradient="param-shift")
    pipe.connect("encode.angles", "circuit.inputs")
    pipe.learn(train_step, outputs={"weights": "array", "loss": "scalar"}, params={"lr": lr})
    pipe.loop("train_step.weights", ["circuit.weights", "train_step.weights"], init=list(init))
    pipe.output("train_step.loss")
    return pipe.build()


def data(seed=0, n=8):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, (n, 2))
    return X, 0.5 * np.cos(np.pi * X[:, 0]) * np.cos(np.pi * X[:, 1])


def sampler_graph(shots=200):
    pipe = hq.Pipeline("samp")
    pipe.input("inputs", "array")
    pipe.execute("c1", _tiny_template(shots).with_observables(["Z0", "X1"]), backend="reference")
    pipe.connect("input.inputs", "c1.inputs")
    pipe.input("weights", "array")
    pipe.connect("input.weights", "c1.weights")
    pipe.output("c1.values")
    pipe.output("c1.stderr")
    return pipe.build()


# --- steps and outputs -------------------------------------------------------------


def test_run_int_steps_and_loop_state():
    res = run_sync(counter_graph(), 5)
    assert res.column("n") == [1, 2, 3, 4, 5]
    assert res.outputs == [{"n": k} for k in range(1, 6)]
    assert res.state == {"count.n": 5}
    assert res.seconds >= 0
    assert run_sync(counter_graph(), 0).outputs == []
    with pytest.raises(ValueError, match="number of steps must be >= 0, got -1"):
        run_sync(counter_graph(), -1)


def test_run_over_stream_outputs_per_step():
    pipe = hq.Pipeline("stream")
    pipe.input("x", "array")
    pipe.preprocess(scaled, outputs="y", params={"k": 3})
    pipe.output("scaled.y")
    pipe.output("scaled.y", "y_again")
    g = pipe.build()
    items = [{"x": np.array([1.0, 2.0])}, {"x": np.array([-1.0])}, {"x": np.array([0.5, 0.5, 0.5])}]
    res = run_sync(g, iter(items))  # any iterable, consumed lazily
    assert len(res.outputs) == 3
    for item, out in zip(items, res.outputs):
        np.testing.assert_array_equal(out["y"], 3 * item["x"])
        assert out["y_again"] is out["y"]


def test_stream_item_with_wrong_keys():
    pipe = hq.Pipeline("keys")
    pipe.input("x").input("k")
    pipe.preprocess(scaled, outputs="y")
    pipe.output("scaled.y")
    g = pipe.build()
    with pytest.raises(GraphError, match=r"step 1: stream items must have keys \['k', 'x'\], got \['x'\]"):
        run_sync(g, [{"x": 1, "k": 2}, {"x": 1}])
    with pytest.raises(GraphError, match=r"step 0: stream items must have keys \['k', 'x'\], got \['k', 'x', 'z'\]"):
        run_sync(g, [{"x": 1, "k": 2, "z": 0}])
    with pytest.raises(GraphError, match=r"stream items must have keys \['k', 'x'\], got \[\]"):
        run_sync(g, 1)


def test_progress_callback():
    seen = []
    run_sync(counter_graph(), 3, progress=lambda done, out: seen.append((done, out)))
    assert seen == [(1, {"n": 1}), (2, {"n": 2}), (3, {"n": 3})]  # steps done, last step's outputs


# --- loop-carried values ----------------------------------------------------------


def test_initial_state_override():
    g = counter_graph(init=10)
    assert run_sync(g, 2).column("n") == [11, 12]
    res = run_sync(g, 2, initial_state={"count.n": 100})
    assert res.column("n") == [101, 102]
    assert res.state == {"count.n": 102}


def test_initial_state_override_applies_to_every_edge_from_that_port():
    X, Y = data()
    g = training_graph(init=(0.1, 0.2))
    a = run_sync(g, [{"batch": X, "target": Y}] * 2, initial_state={"train_step.weights": [0.7, -0.3]})
    b = run_sync(training_graph(init=(0.7, -0.3)), [{"batch": X, "target": Y}] * 2)
    assert a.column("loss") == b.column("loss")
    c = run_sync(g, [{"batch": X, "target": Y}] * 2)
    assert c.column("loss") != a.column("loss")


def test_unknown_initial_state_name():
    with pytest.raises(GraphError, match=r"initial_state names \['count.m', 'nope.n'\], which are not loop-carried sources"):
        run_sync(counter_graph(), 1, initial_state={"nope.n": 1, "count.m": 2, "count.n": 0})


def count_from_empty(n):
    return 1 if n is None else n + 1


def test_missing_init():
    g = counter_graph(init="missing")
    with pytest.raises(GraphError, match=r"loop-carried edge count.n ~> count.n .* has no initial value; give init= or initial_state=\{'count.n': \.\.\.\}"):
        run_sync(g, 1)
    assert run_sync(g, 2, initial_state={"count.n": 0}).column("n") == [1, 2]


def test_init_none_starts_the_loop_empty():
    pipe = hq.Pipeline("from-empty")
    pipe.preprocess(count_from_empty, outputs="n")
    pipe.loop("count_from_empty.n", "count_from_empty.n", init=None)
    pipe.output("count_from_empty.n")
    g = pipe.build()
    assert run_sync(g, 3).column("n") == [1, 2, 3] == hq.run(g, 3, executor="local").column("n")


def test_list_init_reaches_array_port_as_array():
    pipe = hq.Pipeline("arr")
    pipe.learn(check_array, outputs={"w": "array"}, inputs={"w": "array"})
    pipe.loop("check_array.w", "check_array.w", init=[1.0, 2.0])
    pipe.output("check_array.w")
    res = run_sync(pipe.build(), 2)
    np.testing.assert_array_equal(res.column("w")[1], [4.0, 8.0])


def test_loop_values_are_one_step_behind():
    """A fragment reading a loop edge sees the previous step's value, then the new one flows."""
    X, Y = data()
    g = training_graph(lr=0.5, init=(0.1, 0.2))
    res = run_sync(g, [{"batch": X, "target": Y}] * 3)
    # replay by hand: loss at step t uses the weights after t updates
    backend = ReferenceBackend()
    from hqflow.gradients import param_shift

    w = np.array([0.1, 0.2])
    t = _tiny_template()
    for step in range(3):
        batch, post = param_shift(t, np.pi * X, w)
        g = post(backend.run_checked(batch))
        values, jac = g.values, g.jacobian
        out = train_step(values, jac, w, Y, 0.5)
        assert res.column("loss")[step] == pytest.approx(out["loss"], abs=1e-12)
        w = out["weights"]
    np.testing.assert_allclose(res.state["train_step.weights"], w, atol=1e-12)


# --- spans ------------------------------------------------------------------------


def test_spans_one_per_fragment_per_step():
    X, Y = data()
    g = training_graph()
    res = run_sync(g, [{"batch": X, "target": Y}] * 3)
    assert len(res.spans) == 3 * 3
    order = [f.name for f in g.topological_order()]
    assert [s.fragment for s in res.spans] == order * 3
    assert [s.step for s in res.spans] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    by_name = {s.fragment: s for s in res.spans}
    assert by_name["circuit"].resource == "qpu:reference" and by_name["circuit"].kind == "execute"
    assert by_name["encode"].resource == "cpu" and by_name["encode"].kind == "prepare"
    assert by_name["train_step"].kind == "learn"
    assert all(s.outcome == "ok" for s in res.spans)
    for s in res.spans:
        assert 0 <= s.start <= s.end and s.seconds == s.end - s.start
    starts = [s.start for s in res.spans]
    assert starts == sorted(starts)
    for a, b in zip(res.spans, res.spans[1:]):
        assert a.end <= b.start  # synchronous: no overlap
    assert res.spans[-1].end <= res.seconds
    assert res.spans[0].to_dict()["fragment"] == "encode"


def test_fragment_error_span_and_message():
    pipe = hq.Pipeline("err")
    pipe.input("x")
    pipe.preprocess(boom, outputs="y")
    pipe.postprocess(one, outputs="z", name="after")
    pipe.connect("boom.y", "after.x")
    pipe.output("after.z")
    g = pipe.build()
    with pytest.raises(hq.RunFailed, match=re.escape(f"fragment 'boom' ({__name__}:boom) raised ValueError: bad x 3")) as info:
        run_sync(g, [{"x": 1}, {"x": 3}, {"x": 0}])
    assert isinstance(info.value, FragmentError)
    assert isinstance(info.value.__cause__, FragmentError) and isinstance(info.value.__cause__.__cause__, ValueError)
    # the run's result up to the failure: step 0's outputs and spans, then the failed call's
    partial = info.value.result
    assert partial.outputs == [{"z": 2}] and partial.steps == [0]
    spans = partial.spans
    assert [(s.fragment, s.step, s.outcome) for s in spans[:2]] == [("boom", 0, "ok"), ("after", 0, "ok")]
    assert len(spans) == 3  # 'after' never ran in step 1, nor anything in step 2
    last = spans[-1]
    assert last.fragment == "boom" and last.step == 1 and last.resource == "cpu"
    assert last.outcome.kind == "error" and last.outcome.message.startswith("fragment 'boom'")
    assert "bad x 3" in last.outcome.message


def test_execute_fragment_error_stops_the_run():
    pipe = hq.Pipeline("exe-err")
    pipe.input("inputs", "array").input("weights", "array")
    pipe.execute("circuit", _tiny_template(), backend="reference")
    pipe.output("circuit.values")
    ok = {"inputs": np.zeros((1, 2)), "weights": np.zeros(2)}
    bad = {"inputs": np.zeros((1, 3)), "weights": np.zeros(2)}
    with pytest.raises(hq.RunFailed, match=r"^fragment 'circuit' step 1: inputs for 'tiny' must have shape \[B, 2\], "
                                           r"got \[1, 3\]$") as info:
        run_sync(pipe.build(), [ok, bad, ok])
    assert isinstance(info.value.__cause__, FragmentError) and isinstance(info.value.__cause__.__cause__, BackendError)
    partial = info.value.result
    assert partial.steps == [0] and len(partial.outputs) == 1
    assert [(s.fragment, s.step, s.resource) for s in partial.spans if s.outcome == "ok"] == [("circuit", 0, "qpu:reference")]


# --- return conventions -----------------------------------------------------------


def conventions_graph():
    pipe = hq.Pipeline("conv")
    pipe.input("x")
    pipe.preprocess(two_dict, outputs=("a", "b"))
    pipe.preprocess(two_tuple, outputs=("c", "d"))
    pipe.preprocess(one, outputs="e")
    pipe.postprocess(summed, outputs="total")
    for p in "ab":
        pipe.connect(f"two_dict.{p}", f"summed.{p}")
    pipe.connect("two_tuple.c", "summed.c")
    pipe.connect("two_tuple.d", "summed.d")
    pipe.connect("one.e", "summed.e")
    pipe.output("summed.total")
    pipe.output("two_tuple.d")
    return pipe.build()


def test_fragment_return_conventions():
    res = run_sync(conventions_graph(), [{"x": 2}, {"x": 10}])
    # a=x, b=2x, c=x, d=3x, e=x+1
    assert res.outputs == [{"total": 2 + 4 + 2 + 6 + 3, "d": 6}, {"total": 10 + 20 + 10 + 30 + 11, "d": 30}]


def test_single_output_keeps_a_tuple_value_whole():
    pipe = hq.Pipeline("whole")
    pipe.input("x")
    pipe.preprocess(two_tuple, outputs="pair")
    pipe.output("two_tuple.pair")
    assert run_sync(pipe.build(), [{"x": 1}]).outputs == [{"pair": (1, 3)}]


@pytest.mark.parametrize(
    "fn, outputs, got",
    [
        (bad_keys, ("a", "b"), r"\['a', 'c'\]"),
        (short_tuple, ("a", "b"), "tuple"),
        (as_list, ("a", "b"), "list"),
        (one, ("a", "b"), "int"),
        (single_dict_wrong_key, ("a",), r"\['value'\]"),
    ],
)
def test_bad_return(fn, outputs, got):
    pipe = hq.Pipeline("bad")
    pipe.input("x")
    pipe.preprocess(fn, outputs=outputs)
    pipe.output(f"{fn.__name__}.a")
    if len(outputs) > 1:
        pipe.output(f"{fn.__name__}.b")
    with pytest.raises(FragmentError, match=rf"fragment '{fn.__name__}' must return its outputs \[{', '.join(repr(o) for o in outputs)}\] \(a dict or a tuple in order\), got {got}$"):
        run_sync(pipe.build(), [{"x": 1}])


# --- backends and seeds -----------------------------------------------------------


class CountingBackend(ReferenceBackend):
    def __init__(self):
        super().__init__()
        self.batches = []

    def submit(self, batch):
        self.batches.append(batch)
        return super().submit(batch)


def test_one_job_per_execute_step_including_shifted_rows():
    X, Y = data(n=4)
    backend = CountingBackend()
    run_sync(training_graph(), [{"batch": X, "target": Y}] * 3, backends={"reference": backend})
    assert len(backend.batches) == 3
    # 4 samples x (1 unshifted + 2 weights x 2 shifts)
    assert all(b.size == 4 * 5 for b in backend.batches)


def test_given_backend_capabilities_are_validated():
    with pytest.raises(GraphError, match="circuit 'tiny' has 2 qubits but backend 'reference' allows at most 1"):
        run_sync(training_graph(), 1, backends={"reference": ReferenceBackend(max_qubits=1)})


def test_shot_mode_determinism_by_seed():
    g = sampler_graph(shots=200)
    rng = np.random.default_rng(0)
    items = [{"inputs": rng.uniform(0, 3, (5, 2)), "weights": rng.uniform(0, 3, 2)} for _ in range(3)]
    a = run_sync(g, items, seed=1)
    b = run_sync(g, items, seed=1)
    c = run_sync(g, items, seed=2)
    for oa, ob in zip(a.outputs, b.outputs):
        np.testing.assert_array_equal(oa["values"], ob["values"])
        np.testing.assert_array_equal(oa["stderr"], ob["stderr"])
    assert not all(np.array_equal(oa["values"], oc["values"]) for oa, oc in zip(a.outputs, c.outputs))
    assert all(o["stderr"].shape == (5, 2) and np.all(o["stderr"] > 0) for o in a.outputs)
    # the same item at two steps is sampled with different seeds
    same = run_sync(g, [items[0], items[0]], seed=1)
    assert not np.array_equal(same.outputs[0]["values"], same.outputs[1]["values"])
    # and the estimates are close to the exact values
    exact = ReferenceBackend().run_checked(
        CircuitBatch.make(g.fragment("c1").circuit, items[0]["inputs"], items[0]["weights"], shots=None)
    ).values
    assert np.all(np.abs(a.outputs[0]["values"] - exact) < 5 * a.outputs[0]["stderr"] + 1e-9)


def test_exact_mode_ignores_seed():
    X, Y = data()
    a = run_sync(training_graph(), [{"batch": X, "target": Y}] * 2, seed=1)
    b = run_sync(training_graph(), [{"batch": X, "target": Y}] * 2, seed=99)
    assert a.column("loss") == b.column("loss")


def test_shots_with_param_shift_provides_stderr():
    pipe = hq.Pipeline("shots-grad")
    pipe.input("inputs", "array").input("weights", "array")
    pipe.execute("circuit", _tiny_template(shots=500), backend="reference", gradient="param-shift")
    pipe.output("circuit.values")
    pipe.output("circuit.stderr")
    pipe.output("circuit.jacobian")
    g = pipe.build()
    assert [p.name for p in g.fragment("circuit").outputs] == ["values", "stderr", "jacobian"]
    res = run_sync(g, [{"inputs": np.zeros((3, 2)), "weights": np.array([0.3, 0.4])}])
    assert res.outputs[0]["stderr"].shape == (3, 1)


# --- a small training pipeline ----------------------------------------------------


def test_training_reduces_loss():
    X, Y = data(seed=1)
    g = training_graph(lr=0.5, init=(0.1, 0.2))
    res = run_sync(g, [{"batch": X, "target": Y}] * 25)
    losses = res.column("loss")
    assert len(losses) == 25
    assert losses[-1] < 0.5 * losses[0]
    assert sum(b < a for a, b in zip(losses, losses[1:])) >= 20  # mostly decreasing
    assert not np.allclose(res.state["train_step.weights"], [0.1, 0.2])


def test_execute_fragment_error_names_the_fragment():
    from hqflow.ir import Circuit

    c = Circuit(1, name="one")
    (x,) = c.inputs("x", 1)
    pipe = hq.Pipeline("bad-shape")
    pipe.input("x", "array")
    pipe.execute("circ", c.ry(x, 0).build(observables=["Z0"]), backend="reference")
    pipe.connect("input.x", "circ.inputs")
    with pytest.raises(hq.FragmentError, match=r"fragment 'circ' step 0: inputs for 'one' must have shape \[B, 1\]"):
        run_sync(pipe.build(), [{"x": np.zeros((2, 3))}])


# --- the scheduler's semantics: one fragment at a time, in graph order -----------


def from_empty_graph():
    pipe = hq.Pipeline("from-empty")
    pipe.preprocess(count_from_empty, outputs="n")
    pipe.loop("count_from_empty.n", "count_from_empty.n", init=None)
    pipe.output("count_from_empty.n")
    return pipe.build()


def _cases():
    X, Y = data()
    rng = np.random.default_rng(0)
    shots = [{"inputs": rng.uniform(0, 3, (5, 2)), "weights": rng.uniform(0, 3, 2)} for _ in range(3)]
    return {
        "training, param-shift": (training_graph(), [{"batch": X, "target": Y}] * 4, {}),
        "training, initial_state": (training_graph(), [{"batch": X, "target": Y}] * 3,
                                    {"initial_state": {"train_step.weights": [0.7, -0.3]}}),
        "shots, seeded": (sampler_graph(shots=200), shots, {"seed": 3}),
        "return conventions": (conventions_graph(), [{"x": 2}, {"x": 10}, {"x": -1}], {}),
        "counter, initial_state": (counter_graph(init=10), 4, {"initial_state": {"count.n": 100}}),
        "loop started empty": (from_empty_graph(), 3, {}),
    }


@pytest.mark.parametrize("executor", ["sync", "local"])
@pytest.mark.parametrize("case", list(_cases()))
def test_the_sync_and_local_executors_equal_the_plain_loop(case, executor, plain_loop):
    """Bit for bit: the same outputs at every step and the same final loop values."""
    graph, stream, options = _cases()[case]
    steps = stream if not isinstance(stream, int) else [{}] * stream
    outputs, state = plain_loop(graph, steps, {"reference": ReferenceBackend()}, **options)
    res = hq.run(graph, stream, executor=executor, **options)
    assert len(res.outputs) == len(outputs) and res.steps is None
    np.testing.assert_equal(res.outputs, outputs)  # arrays and floats compared exactly
    np.testing.assert_equal({str(k): v for k, v in res.state.items()}, state)  # keyed by PortRef
