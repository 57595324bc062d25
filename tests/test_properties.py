"""Properties (hypothesis): every input is accepted, or refused with hqflow's own error type and a
one-line message. Graph JSON documents, circuits built from random gate sequences, and ``hqflow``
argument vectors for every subcommand. benchmarks/fuzz.py runs 10,000 cases of each family."""
import contextlib
import io
import json
import math
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hqflow as hq
from hqflow.ir import GATES, Circuit, CircuitError, ExprError, Graph, GraphError

OWN = (GraphError, CircuitError, ExprError)
SETTINGS = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def _clean_line(text: str) -> bool:
    return "\n" not in text and not any(unicodedata.category(ch) in ("Cc", "Cf", "Cs") for ch in text)


def _accepted_or_own(fn, *args) -> None:
    try:
        fn(*args)
    except OWN as exc:
        assert _clean_line(str(exc)), repr(str(exc))


# --- graph documents -----------------------------------------------------------------------------

def learn_step(values, weights, lr):  # the seed graph's learner (never run)
    return weights, 0.0


def _seed_document() -> dict:
    c = Circuit(2, name="fit")
    x, w = c.inputs("x", 2), c.weights("w", 2)
    c.ry(x[0], 0).ry(x[1], 1).cz(0, 1).rz(w[0] * 2 + 0.5, 0).ry(w[1], 1)
    pipe = hq.Pipeline("props")
    pipe.input("x", "array")
    pipe.execute("circuit", c.build(observables=["Z0 Z1", [(0.5, "X0"), (-1.0, "Y1")]]), backend="reference")
    pipe.connect("input.x", "circuit.inputs")
    pipe.learn(outputs=("weights", "loss"), params={"lr": 0.5})(learn_step)
    pipe.connect("circuit.values", "learn_step.values")
    pipe.loop("learn_step.weights", ["circuit.weights", "learn_step.weights"], init=[0.1, 0.2])
    pipe.output("learn_step.loss")
    return json.loads(pipe.build().to_json())


SEED = _seed_document()


def _paths(doc, prefix=()):
    yield prefix
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for k, v in items:
        yield from _paths(v, prefix + (k,))


PATHS = list(_paths(SEED))[1:]
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(min_value=10**30, max_value=10**60)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=30),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12)


@st.composite
def mutated_documents(draw):
    doc = json.loads(json.dumps(SEED))
    for _ in range(draw(st.integers(0, 3))):
        path = draw(st.sampled_from(PATHS))
        node = doc
        try:
            for p in path[:-1]:
                node = node[p]
            if draw(st.booleans()) and isinstance(node, dict):
                node.pop(path[-1], None)
            else:
                node[path[-1]] = draw(JSON_VALUES)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed the way there
    text = json.dumps(doc, allow_nan=True)
    how = draw(st.sampled_from(["whole", "whole", "truncate", "nest", "digits", "insert"]))
    if how == "truncate":
        text = text[: draw(st.integers(0, len(text)))]
    elif how == "nest":
        depth = draw(st.integers(100, 3000))
        text = text.replace('"edges": [', '"edges": [' + "[" * depth + "]" * depth + ",", 1)
    elif how == "digits":
        text = text.replace('"version": 2', '"version": 2' + "0" * draw(st.integers(1, 6000)), 1)
    elif how == "insert":
        i = draw(st.integers(0, len(text)))
        text = text[:i] + draw(st.text(max_size=5)) + text[i:]
    return text


def _load(text: str) -> None:
    graph = Graph.from_json(text)
    graph.validate(resolve=False)
    str(graph)
    graph.validate(resolve=True)


@SETTINGS
@given(mutated_documents())
def test_graph_documents_are_read_or_refused_in_one_line(text):
    _accepted_or_own(_load, text)


@SETTINGS
@given(st.binary(max_size=200))
def test_random_bytes_are_not_a_graph(data):
    text = data.decode("utf-8", errors="surrogateescape")
    _accepted_or_own(_load, text)


# --- circuits ------------------------------------------------------------------------------------

ARGS = st.one_of(st.integers(-2, 4), st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(),
                 st.text(max_size=3), st.sampled_from(["x0", "w0"]), st.lists(st.integers(0, 2), max_size=2))
OBSERVABLES = st.one_of(st.sampled_from(["Z0", "Z0 Z1", "X0 Y1", "Q0", "Z9", "Z0 Z0", "", "Z" + "9" * 20]),
                        st.lists(st.tuples(st.floats(allow_nan=True) | st.text(max_size=2), st.sampled_from(["Z0", "X1"])),
                                 max_size=3),
                        st.integers())


@st.composite
def gate_sequences(draw):
    n = draw(st.sampled_from([1, 2, 3, 3, 3, 0, -1, 2.5, "2", None]))
    calls = draw(st.lists(st.tuples(st.sampled_from(sorted(GATES) + ["nope"]), st.lists(ARGS, max_size=4)),
                          min_size=1, max_size=6))
    return n, calls, draw(OBSERVABLES)


def _build(case) -> None:
    n, calls, obs = case
    c = Circuit(n)
    names = {}
    used = {a for _, args in calls for a in args if isinstance(a, str)}
    if "x0" in used:
        names["x0"] = c.inputs("x", 1)[0]
    if "w0" in used:
        names["w0"] = math.pi * c.weights("w", 1)[0]
    for gate, args in calls:
        args = [names.get(a, a) if isinstance(a, str) else a for a in args]
        if gate in GATES:
            getattr(c, gate)(*args)
        else:
            c.gate(gate, args)
    c.build(observables=[obs])


@SETTINGS
@given(gate_sequences())
def test_circuits_from_random_gate_sequences_build_or_are_refused_in_one_line(case):
    _accepted_or_own(_build, case)


# --- command lines --------------------------------------------------------------------------------

VALUES = ["", "-1", "0", "1", "3", "1.5", "abc", "NaN", "inf", "1e309", "10**30", "[]", "{}", "null", "\x1b[2K",
          "\u202eevil", "\udcff", "a" * 300, "/nonexistent/x", "run0", "graph.json", "binary.pt", "folder",
          "reference:x", "pennylane:", "compiled", "cartpole", "CartPole-v1", "nosuch:Env-v0", "ppo", "dqn",
          "pipelined", "ray-actors", "qvalue-pqc", "qaoa", "--json"]
FLAGS = {"train": ["--env-module", "--algo", "--backend", "--seed", "--episodes", "--pool", "--distribution",
                   "--staleness", "--set", "--run-dir", "--resume", "--checkpoint-every", "--budget", "--backend-opt"],
         "eval": ["--episodes", "--seed", "--backend", "--record"],
         "run": ["--steps", "--seed", "--backend", "--out", "--run-dir", "--dry-run"],
         "inspect": ["--png", "--no-resolve"], "trace": ["--out"]}
KEYS = ["n_layers", "n_qubits", "lr_in", "lr_out", "gamma", "seed", "beta", "update_epochs", "threads", "backend",
        "batch_episodes", "max_episodes", "num_envs", "obs_encoding", "env", "nope"]


@st.composite
def argument_vectors(draw):
    command = draw(st.sampled_from(sorted(FLAGS)))
    argv = [command]
    if draw(st.integers(0, 9)):
        argv.append(draw(st.sampled_from(VALUES) | st.text(max_size=12)))
    for _ in range(draw(st.integers(0, 5))):
        flag = draw(st.sampled_from(FLAGS[command]))
        argv.append(flag)
        if flag in ("--dry-run", "--no-resolve"):
            continue
        value = draw(st.sampled_from(VALUES) | st.text(max_size=12))
        argv.append(f"{draw(st.sampled_from(KEYS))}={value}" if flag == "--set" else value)
    return argv


@pytest.fixture(scope="module")
def cli_folder(tmp_path_factory):
    """A scratch folder with a real run, a graph, a binary file and a folder; training, a workload's
    run and evaluation episodes stubbed: what is checked is what happens before the work starts."""
    import os

    from hqflow.workloads import WORKLOADS, get_workload
    from hqflow.workloads.rl import runner, trained

    folder = tmp_path_factory.mktemp("cli")
    old = os.getcwd()
    os.chdir(folder)
    (folder / "folder").mkdir()
    (folder / "graph.json").write_text(json.dumps(SEED))
    (folder / "binary.pt").write_bytes(b"\x80\x02}q\x00(X\x05\x00\xff\xfe")
    runner.train("reinforce", runner.algorithm("reinforce").Config(max_episodes=2, n_layers=1, batch_episodes=2),
                 "sync", run_dir="run0")
    mp = pytest.MonkeyPatch()

    def train(algo, cfg, distribution=None, run_dir=None, resume=False, **kw):
        runner.initial_state(algo, cfg)
        return {"returns": [1.0], "episodes_to_solve": None, "seconds": 0.01, "env_steps": 1, "env_steps_per_s": 1.0,
                "circuit_evals_per_s": 1.0, "distribution": "sync"}

    mp.setattr(runner, "train", train)
    mp.setattr(trained, "evaluate", lambda run, **kw: trained.load_policy(run, kw.get("backend")) and {
        "env": "x", "mean_return": 0.0, "std_return": 0.0, "episodes": 1, "returns": [0.0]})
    for name in WORKLOADS:
        mp.setattr(get_workload(name), "run", lambda cfg, progress=None: {"loss": 0.0})
    yield folder
    mp.undo()
    os.chdir(old)


@SETTINGS
@given(argv=argument_vectors())
def test_command_lines_exit_0_or_2_with_one_line(cli_folder, argv):
    from hqflow.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's --help
            code = exc.code
    text = err.getvalue().strip()
    assert code in (0, 2), (code, text[-500:])
    if code == 2:
        assert len(text.splitlines()) == 1 and _clean_line(text) and text.startswith("hqflow"), text[:500]
