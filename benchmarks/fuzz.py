"""Fuzzing: every input is accepted or rejected with hqflow's own error and a one-line message.

Families (``--family``, all by default):

* ``graph``: graph JSON documents, valid and mutated (deleted keys, wrong types,
  NaN/Infinity, huge numbers, unicode and control characters, deep nesting,
  truncation, random bytes), read by ``Graph.from_json`` and validated;
* ``circuit``: circuits built with ``hqflow.ir.Circuit`` from random gate sequences with
  bad arguments (wrong arity, non-integer or out-of-range wires, NaN angles, odd types),
  and random observables;
* ``cli``: ``hqflow`` argument vectors. The options are read from hqflow's own parser, so a new option is
  fuzzed without a word here. First a sweep: every option (and positional) of ``train``, ``run``, ``plan`` and
  ``eval`` with each hostile value (``HOSTILE_ARGS``: 0, -1, 1e309, nan, 2**70, '', 5,000 characters, bytes
  that are not UTF-8, 5,000 digits), added to a vector that runs (checked first) with what makes the option
  count (``--learners`` with multi-learner, ...); ``--set`` and ``--backend-opt`` take it as a value of every
  config key and emulated-QPU option. Then random vectors of every subcommand: plausible, hostile and garbage
  values, paths that are missing, too long, binary, folders, in /proc or real files, in a scratch folder. The
  work itself (training, a workload's run, a plan's calibration and search, evaluation episodes) is a stub
  that returns what a real small one returned: the family checks what happens before work starts, where a
  bad input must be refused;
* ``numbers``: huge numbers (integers past a float's range, of thousands of digits, infinities,
  the smallest subnormal) put anywhere in graph documents, in circuits built in Python (angles,
  wires, qubits, shots, coefficients) and in command-line values;
* ``text``: text no output can write or show as it is (lone surrogates, as JSON's ``\\ud800`` escapes
  and Linux's undecodable arguments make them; control and bidirectional characters) in every
  string of graph documents, in circuit, parameter and observable names, and in command-line
  values and files that are not UTF-8.

Output goes to strict UTF-8 streams, as on a terminal: a message that cannot be printed is a crash.

A case is *accepted* (no error; for ``cli``: exit 0), *rejected* (``GraphError``/``CircuitError``/
``ExprError`` with a one-line message free of control characters; for ``cli``: exit 2 with one such
line on stderr) or a *crash* (anything else: another exception, a traceback, another exit code (1 is a
run's documented failure, and no run fails here: the work is stubbed), a message that breaks those rules,
a case that takes over 20 s, stopped by an alarm). Crashes are printed with their input.

    python benchmarks/fuzz.py [--quick] [--cases N] [--family graph,circuit,cli,numbers,text] [--seed S]

The last line printed is one JSON object: ``cases``, ``accepted``, ``rejected``, ``crashes``
(totals) and the same per family.
"""
from __future__ import annotations

import argparse
import base64
import json
import random
import sys
import time
import unicodedata

from hqflow.ir import GATES, Circuit, CircuitError, ExprError, GraphError

OWN_ERRORS = (GraphError, CircuitError, ExprError)
ODD_VALUES = [None, True, False, 0, -1, 1.5, 2**70, float("nan"), float("inf"), -float("inf"), "", "x",
              "\x1b[2K\u202eevil\n", "\ud800", "Z0 Z1", ".x:f", "..:f", ".:f", "os:nope", "math:pi", [], {}, [1, 2], {"a": 1}, "a" * 5000]


def _one_line(message: str) -> bool:
    return "\n" not in message and not any(unicodedata.category(ch) in ("Cc", "Cf", "Cs") for ch in message)


def _judge(run, case) -> tuple[str, str]:
    try:
        run(case)
    except OWN_ERRORS as exc:
        text = str(exc)
        return ("rejected", "") if _one_line(text) else ("crash", f"message not one clean line: {text[:200]!r}")
    except RecursionError:
        return "crash", "RecursionError"
    except Exception as exc:  # noqa: BLE001 - anything else is what we look for
        return "crash", f"{type(exc).__name__}: {str(exc)[:200]}"
    return "accepted", ""


# --- graph documents ------------------------------------------------------------------------------


def step(values, jacobian, weights, lr):  # the learn fragment of the seed graph (never run)
    return weights, 0.0


def _seed_documents() -> list[str]:
    import hqflow as hq
    from hqflow.ir import Circuit as C

    c = C(2, name="fit")
    x, w = c.inputs("x", 2), c.weights("w", 2)
    c.ry(x[0], 0).ry(x[1], 1).cz(0, 1).ry(w[0], 0).ry(w[1], 1)
    pipe = hq.Pipeline("fuzz")
    pipe.input("x", "array")
    pipe.execute("circuit", c.build(observables=["Z0 Z1", [(0.5, "X0"), (-1.0, "Y1")]]), backend="reference",
                 gradient="param-shift")
    pipe.connect("input.x", "circuit.inputs")

    pipe.learn(outputs=("weights", "loss"), params={"lr": 0.5})(step)
    pipe.loop("step.weights", ["circuit.weights", "step.weights"], init=[0.1, 0.2])
    pipe.output("step.loss")
    docs = [pipe.build().to_json()]
    from qiskit.circuit.library import real_amplitudes, zz_feature_map

    from hqflow.ir import from_qiskit

    fmap, ansatz = zz_feature_map(2), real_amplitudes(2, reps=1)
    t = from_qiskit(fmap.compose(ansatz), inputs=fmap.parameters, weights=ansatz.parameters, observables=["Z0"])
    pipe = hq.Pipeline("fmap")
    pipe.input("x", "array")
    pipe.input("w", "array")
    pipe.execute("circuit", t, backend="qpu")
    pipe.connect("input.x", "circuit.inputs")
    pipe.connect("input.w", "circuit.weights")
    pipe.output("circuit.values")
    docs.append(pipe.build().to_json())  # "qpu": a pool name, bound when the graph runs
    return docs


def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, prefix + (i,))


def _set(doc, path, value, delete=False):
    if not path:
        return value
    node = doc
    for p in path[:-1]:
        node = node[p]
    if delete and isinstance(node, dict):
        del node[path[-1]]
    elif delete and isinstance(node, list):
        node.pop(path[-1])
    else:
        node[path[-1]] = value
    return doc


def _mutate_graph(rng: random.Random, seeds: list[str]) -> str | bytes:
    text = rng.choice(seeds)
    kind = rng.random()
    if kind < 0.1:
        return text  # a valid document
    if kind < 0.2:  # text-level damage
        how = rng.choice(["truncate", "bytes", "insert", "digits", "nest"])
        if how == "truncate":
            return text[: rng.randrange(len(text))]
        if how == "bytes":
            data = bytearray(text.encode())
            for _ in range(rng.randint(1, 8)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            return bytes(data)
        if how == "insert":
            i = rng.randrange(len(text))
            return text[:i] + rng.choice(["\x00", "\u202e", "\ud800", "Infinity", "NaN", "-", "[", "}"]) + text[i:]
        if how == "digits":
            return text.replace('"version": 1', '"version": 1' + "0" * rng.choice([10, 5000]), 1)
        return text.replace('"edges": [', '"edges": [' + "[" * 2000 + "]" * 2000 + ",", 1)
    doc = json.loads(text)
    if kind < 0.3:  # a fragment's function reference
        frag = rng.choice(doc["fragments"])
        frag["fn"] = rng.choice([".x:f", "..:f", ".:f", "os:nope", "math:pi", "math:sqrt", "no_such_module:f", ":f",
                                 "a:", 3, None, "hqflow.ir.graph:GraphError.__init__"])
        return json.dumps(doc)
    for _ in range(rng.randint(1, 3)):
        paths = list(_paths(doc))[1:]
        if not paths:
            break
        path = rng.choice(paths)
        r = rng.random()
        if r < 0.3:
            doc = _set(doc, path, None, delete=True)
        elif r < 0.5 and path[-1] == "qpy" and isinstance(_get(doc, path), str):
            data = bytearray(base64.b64decode(_get(doc, path)))
            data[rng.randrange(len(data))] = rng.randrange(256)
            doc = _set(doc, path, base64.b64encode(bytes(data)).decode())
        elif r < 0.6:
            doc = _set(doc, path, f"__DEEP{rng.choice([50, 1200])}__")
        else:
            doc = _set(doc, path, rng.choice(ODD_VALUES))
    text = json.dumps(doc, allow_nan=True)
    for depth in (50, 1200):  # nesting too deep for json.dumps to write, put in as text
        text = text.replace(f'"__DEEP{depth}__"', "[" * depth + "1" + "]" * depth)
    return text


def _get(doc, path):
    for p in path:
        doc = doc[p]
    return doc


def _load_graph(case) -> None:
    from hqflow.ir import Graph

    if isinstance(case, bytes):
        try:
            case = case.decode("utf-8")
        except UnicodeDecodeError:
            return  # the CLI family covers files that are not text
    graph = Graph.from_json(case)
    graph.validate(resolve=False)
    str(graph)
    graph.validate(resolve=True)  # imports the functions the document names


# --- circuits -------------------------------------------------------------------------------------

GATES_TO_TRY = ["rx", "ry", "rz", "cx", "cz", "u", "crx", "rzz", "ccx", "h", "nope", "swap", "p"]


def _random_circuit(rng: random.Random):
    """Half the cases are well-formed circuits on 3 qubits; the others have bad arguments anywhere."""
    good = rng.random() < 0.5
    n = 3 if good else rng.choice([1, 2, 3, 0, -1, 2.5, "2"])
    calls = []
    for _ in range(rng.randint(1, 6)):
        gate = rng.choice([g for g in GATES_TO_TRY if g in GATES] if good else GATES_TO_TRY)
        if good:
            spec = GATES[gate]
            angles = [rng.choice([0.3, -1.2, "x0", "w0"]) for _ in range(spec.num_params)]
            args = angles + rng.sample(range(3), spec.num_wires)
        else:
            args = [rng.choice([0, 1, 2, 0.5, 3, -1, True, "a", None, float("nan"), 1e308, "x0", "w0"])
                    for _ in range(rng.randint(0, 4))]
        calls.append((gate, args))
    obs = rng.choice(["Z0", "Z0 Z1", [(1.0, "X0"), (0.5, "Y2")]] if good else
                     ["Z0", "Q0", "Z9", [(float("nan"), "Z0")], [("a", "Z0")], 5, "Z0 Z0", "Z" + "9" * 20])
    return n, calls, obs


def _build_circuit(case) -> None:
    n, calls, obs = case
    c = Circuit(n)  # a bad n is the template's problem, found by build()
    used = {a for _, args in calls for a in args if isinstance(a, str)}
    names = {}
    if "x0" in used:
        names["x0"] = c.inputs("x", 1)[0]
    if "w0" in used:
        names["w0"] = 2 * c.weights("w", 1)[0] + 1
    for gate, args in calls:
        args = [names.get(a, a) if isinstance(a, str) else a for a in args]
        if gate in GATES:
            getattr(c, gate)(*args)
        else:
            c.gate(gate, args)
    c.build(observables=[obs])


# --- hostile numbers and text -----------------------------------------------------------------------

HUGE = [10**80, -(10**80), 10**309, -(10**400), int("9" * 4000), float("inf"), -float("inf"), 1e308, 5e-324]
HOSTILE_TEXT = ["\ud800", "a\udcffb", "\udfff" * 3, "\ud83d", "x\x00y", "\x1b[31mred", "\u202eevil", "\ufffe",
                "line\nbreak"]


def _leaves(doc, kind, path=()):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _leaves(v, kind, path + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _leaves(v, kind, path + (i,))
    elif isinstance(doc, kind) and not isinstance(doc, bool):
        yield path


def _hostile_graph(rng: random.Random, seeds: list[str], kind, values) -> str:
    doc = json.loads(rng.choice(seeds))
    paths = [p for p in _leaves(doc, kind) if p[-1] != "qpy"]
    for path in rng.sample(paths, min(len(paths), rng.randint(1, 3))):
        doc = _set(doc, path, rng.choice(values))
    return json.dumps(doc, allow_nan=True)


def _hostile_circuit(rng: random.Random, values) -> tuple:
    """``(n, calls, obs, shots, names)``: a well-formed circuit with one or two hostile values in it."""
    n, calls, obs = _random_circuit(random.Random(rng.random()))
    n, calls = 3, [("ry", ["x0", 0]), ("rz", ["w0", 1]), ("cx", [0, 2])]
    shots, names = None, {"circuit": "c", "input": "x", "weight": "w", "obs": "Z0 Z1"}
    for _ in range(rng.randint(1, 2)):
        where, value = rng.choice(["n", "angle", "wire", "shots", "coeff", "name"]), rng.choice(values)
        if where == "n":
            n = value
        elif where == "angle":
            calls.append(("rx", [value, rng.randrange(3)]))
        elif where == "wire":
            calls.append(("h", [value]))
        elif where == "shots":
            shots = value
        elif where == "coeff":
            names["obs"] = [(value, "Z0")]
        else:
            names[rng.choice(["circuit", "input", "weight", "obs"])] = value
    return n, calls, [names["obs"]], shots, names


def _build_hostile_circuit(case) -> None:
    n, calls, obs, shots, names = case
    c = Circuit(n, name=names["circuit"])
    x, w = c.inputs(names["input"], 1), c.weights(names["weight"], 1)
    for gate, args in calls:
        getattr(c, gate)(*[{"x0": x[0], "w0": w[0]}.get(a, a) if isinstance(a, str) else a for a in args])
    t = c.build(observables=obs, shots=shots)
    _print(str(t))


def _print(text: str) -> None:
    """What printing ``text`` to a UTF-8 terminal does: a lone surrogate cannot be written."""
    text.encode("utf-8")


def _hostile(kind, values, argv_values):
    def make(rng: random.Random, seeds: list[str]):
        r = rng.random()
        if r < 0.5:
            return "graph", _hostile_graph(rng, seeds, kind, values)
        if r < 0.75:
            return "circuit", _hostile_circuit(rng, values)
        argv = _random_argv(rng)
        spots = [i for i, a in enumerate(argv) if i > 0 and not a.startswith("--")] or [len(argv)]
        i = rng.choice(spots)
        argv[i:i + 1] = [rng.choice(argv_values)]
        return "cli", argv

    def run(case) -> None:
        what, data = case
        {"graph": _load_graph, "circuit": _build_hostile_circuit, "cli": _run_cli}[what](data)

    return make, run


# --- command lines ------------------------------------------------------------------------------

HOSTILE_ARGS = ["0", "-1", "1e309", "nan", str(2**70), "", "a" * 5000, "\udcff\udcfe", "caf\udce9.json", "9" * 5000]
"""the hostile values every option of train, run, plan and eval is swept with: zero, negative, past a float, NaN,
past int64, empty, very long, not UTF-8 (as Linux hands undecodable argv bytes to Python) and of 5,000 digits"""
CLI_VALUES = ["", "-1", "0", "1", "2", "3", "1.5", "abc", "NaN", "nan", "inf", "-inf", "1e309", "10**30", "9" * 40,
              "[]", "{}", "null", "true", "[1, 2]", '{"a": 1}', "\x1b[2K", "\u202eevil", "\udcff", "a" * 300,
              "/" + "a" * 300 + "/x", "/nonexistent/x", "/proc/x.json", "run0", "graph.json", "binary.pt", "spans.json",
              "folder", "out.png", "g.txt", "reference", "reference:x", "pennylane:", "compiled", "emulated-qpu",
              "cartpole", "CartPole-v1", "acrobot", "frozenlake", "Pendulum-v1", "nosuch:Env-v0", "hqplug/X-v0",
              "reinforce", "PPO", "dqn", "Sync", "pipelined", "ray-actors", "softmax-pqc", "qaoa", "vqe", "classifier",
              "--json", "-h"]
VALID = {  # plausible values by option (its dest); an option not here takes its choices, else CLI_VALUES
    "env": ["cartpole", "frozenlake", "CartPole-v1"], "workload": ["vqe", "qaoa", "classifier", "Vqe"],
    "run": ["run0", "spans.json"], "graph": ["graph.json"], "resume": ["run0"], "algo": ["reinforce", "ppo", "DQN"],
    "backend": ["compiled", "reference", "emulated-qpu", "emulated-qpu:compiled"], "steps": ["1", "2"],
    "episodes": ["1", "2"], "seed": ["0", "7"], "pool": ["1", "2"], "calibrate": ["2"], "budget": ["0", "100"],
    "staleness": ["0", "1"], "max_staleness": ["0", "1"], "learners": ["2"], "checkpoint_every": ["1", "5"],
    "compression": ["none", "float16", "topk:0.2"], "shots": ["100"], "spsa_samples": ["2"], "spsa_epsilon": ["0.1"],
    "shot_budget": ["100000"], "dry_run_updates": ["1"], "gradients": ["param-shift,spsa"], "shots_range": ["100:200"],
    "spsa_samples_range": ["2:3"], "ray_address": ["auto"], "record": ["videos"], "env_module": ["mymod"],
    "out": ["out.json", "folder"], "png": ["g.png"], "profile": ["prof.json"], "run_dir": ["newrun", "run0"],
    "resources": ["pool.json"], "azure_opt": ["x=1"],
}
COMPANIONS = {  # what makes an option count (--learners needs multi-learner, ...): given with it in the sweep
    "learners": ["--distribution", "multi-learner"], "compression": ["--distribution", "multi-learner"],
    "staleness": ["--distribution", "pipelined"], "ray_address": ["--distribution", "ray-actors"],
    "max_staleness": ["--plan", "auto"], "profile": ["--plan", "auto"], "objective": ["--plan", "auto"],
    "gradients": ["--plan", "auto", "--objective", "cost"], "shots_range": ["--plan", "auto", "--objective", "cost"],
    "spsa_samples_range": ["--plan", "auto", "--objective", "cost"], "spsa_samples": ["--gradient", "spsa"],
    "spsa_epsilon": ["--gradient", "spsa"], "shot_budget": ["--backend", "emulated-qpu"],
    "dry_run_updates": ["--dry-run"], "pool": ["--backend", "emulated-qpu"],
}
BASE = {"train": ["train", "cartpole", "--episodes", "2", "--set", "n_layers=1", "--set", "batch_episodes=2"],
        "run": ["run", "vqe", "--steps", "1"], "plan": ["plan", "vqe", "--steps", "2", "--calibrate", "2"],
        "eval": ["eval", "run0", "--episodes", "1"], "inspect": ["inspect", "graph.json"],
        "trace": ["trace", "spans.json"], "backends": ["backends"]}
SWEPT = ("train", "run", "plan", "eval")


def _cli_options() -> dict[str, list]:
    """Every subcommand's arguments, read from hqflow's own parser (so a new option is fuzzed without a word
    here): ``{command: [(option strings, or [] for a positional; dest; takes a value; choices)]}``."""
    from hqflow.cli import _parser

    commands = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    return {name: [(a.option_strings, a.dest, a.nargs != 0, a.choices) for a in parser._actions
                   if not isinstance(a, argparse._HelpAction)] for name, parser in commands.items()}


def _keys() -> dict[str, list[str]]:
    """The keys of ``--set`` (every RL algorithm's config fields) and ``--backend-opt`` (the emulated QPU's)."""
    import dataclasses
    import inspect

    from hqflow.backends.emulated import EmulatedQPU
    from hqflow.workloads.rl import dqn, ppo, reinforce

    return {"set": sorted({f.name for mod in (reinforce, ppo, dqn) for f in dataclasses.fields(mod.Config)}),
            "backend_opt": [k for k in inspect.signature(EmulatedQPU).parameters] + ["x"]}


_OPTIONS: dict = {}


def _option_value(rng: random.Random, dest: str, choices, hostile: str | None) -> str:
    """A value for option ``dest``: ``hostile`` where given, else a plausible one (``KEY=VALUE`` for --set and
    --backend-opt, the hostile value on either side)."""
    if dest in ("set", "backend_opt"):
        key = rng.choice(_OPTIONS["keys"][dest])
        member = f"{rng.choice(['0', '1', '9' * 30, '-1'])}:" if dest == "backend_opt" and rng.random() < 0.1 else ""
        if hostile is not None and rng.random() < 0.2:
            return f"{member}{hostile}={rng.choice(CLI_VALUES)}"
        return f"{member}{key}={hostile if hostile is not None else rng.choice(CLI_VALUES)}"
    if hostile is not None:
        return hostile
    return rng.choice(VALID.get(dest) or list(choices or []) or CLI_VALUES)


def _cli_sweep() -> list[list[str]]:
    """One case per option of train, run, plan and eval (positionals too) and hostile value: the command's base
    vector, the option's companions, and the option with that value (KEY=VALUE options with it as the value)."""
    if not _OPTIONS:
        _OPTIONS.update(options=_cli_options(), keys=_keys())
    rng, cases = random.Random(0), []
    for command in SWEPT:
        for flags, dest, takes, choices in _OPTIONS["options"][command]:
            if not takes:
                continue
            for value in HOSTILE_ARGS:
                argv = list(BASE[command])
                if not flags:  # the positional: in place of the base's
                    argv[1] = value
                elif flags[0] == "--resume":
                    argv = ["train", "--resume", value]
                else:
                    argv += COMPANIONS.get(dest, []) + [flags[0], _option_value(rng, dest, choices, value)]
                cases.append(argv)
    return cases


def _random_argv(rng: random.Random, keys=None) -> list[str]:
    """A random vector: a subcommand (train most often), its positional, and up to 5 of its options with plausible
    or hostile values, or a stray flag."""
    if not _OPTIONS:
        _OPTIONS.update(options=_cli_options(), keys=_keys())
    options = _OPTIONS["options"]
    command = rng.choice(list(options) + ["train"] * 4 + ["run", "plan", "eval"])
    argv = [command] if rng.random() > 0.02 else [rng.choice(CLI_VALUES)]
    positional = [o for o in options[command] if not o[0]]
    named = [o for o in options[command] if o[0]]
    if positional and rng.random() < 0.9:
        argv.append(_option_value(rng, positional[0][1], None, rng.choice(HOSTILE_ARGS) if rng.random() < 0.15 else None))
    for _ in range(rng.randrange(0, 6)):
        if rng.random() < 0.05:
            argv.append(rng.choice(["--nope", "-x", "--set=", "--steps=1"]))
            continue
        flags, dest, takes, choices = rng.choice(named)
        argv.append(rng.choice(flags))
        if takes and rng.random() < 0.97:
            argv.append(_option_value(rng, dest, choices, rng.choice(HOSTILE_ARGS) if rng.random() < 0.3 else None))
    return argv


class _Hang(BaseException):  # raised by the alarm in a case past its time; no ``except Exception`` takes it
    pass


class _Cli:
    """Runs ``hqflow.cli`` in this process, in a scratch folder, with the work itself stubbed: a workload's
    run, a training, a plan (its calibration and search) and evaluation episodes return what a real small one
    returned (made once here; a saved ``--profile`` is still read). What is checked is what happens before the
    work: the work's own faults are its tests'."""

    TIMEOUT = 20  # seconds a case may take

    def __init__(self):
        import dataclasses
        import os
        import tempfile

        from hqflow.cli import run as cli_run
        from hqflow.cli import plan as cli_plan
        from hqflow.engine.distribution import get_distribution
        from hqflow.workloads import WORKLOADS, get_workload
        from hqflow.workloads.rl import planned, runner, trained

        self.folder = tempfile.mkdtemp(prefix="hqflow-fuzz-cli-")
        os.chdir(self.folder)
        os.makedirs("folder")
        with open("graph.json", "w") as fh:
            fh.write(_seed_documents()[0])
        with open("binary.pt", "wb") as fh:
            fh.write(b"\x80\x02}q\x00(X\x05\x00\xff\xfe")
        with open("latin1.json", "wb") as fh:  # text, but not UTF-8
            fh.write(_seed_documents()[0].replace('"fuzz"', '"caf\u00e9"').encode("latin-1"))
        with open("pool.json", "w") as fh:
            json.dump({"pools": {"emulated-qpu": [["emulated-qpu", {}]]}}, fh)
        with open("spans.json", "w") as fh:
            json.dump([{"fragment": "f", "kind": "learn", "resource": "cpu", "step": 0, "start": 0.0, "end": 1.0,
                        "outcome": "ok"}], fh)
        trained_out = runner.train("reinforce", runner.algorithm("reinforce").Config(
            max_episodes=2, n_layers=1, batch_episodes=2), "sync", run_dir="run0")  # a real run directory
        vqe = get_workload("vqe")
        small_plan = cli_plan.make_plan(vqe, dataclasses.replace(vqe.Config(), steps=2), None, calibrate=2)
        real_evaluate = trained.evaluate

        def train(algo, cfg, distribution=None, run_dir=None, resume=False, **kw):
            if resume:
                runner.load_run(run_dir)
            runner.initial_state(algo, cfg)  # the policy the configuration describes
            return trained_out

        def make_plan(module, cfg, backends, spans=None, **kw):  # (the CLI read --profile before it)
            return small_plan

        def plan_training(algo, cfg, placement, profile=None, **kw):
            return small_plan, get_distribution("sync"), {}, placement

        runner.train = train
        trained.evaluate = lambda run, **kw: real_evaluate(run, **{**kw, "episodes": 1, "max_steps": 3, "record": None})
        cli_run.make_plan = cli_plan.make_plan = make_plan
        planned.plan_training = plan_training
        for name in WORKLOADS:
            module = get_workload(name)
            small = module.run(dataclasses.replace(module.Config(), steps=2))
            module.run = lambda cfg, progress=None, small=small, **kw: small

    def __call__(self, argv: list[str]) -> None:
        import contextlib
        import io
        import signal

        from hqflow.cli import main

        def hang(*_):
            raise _Hang

        out, err = (io.TextIOWrapper(io.BytesIO(), encoding="utf-8", newline="") for _ in range(2))  # a terminal's
        old = signal.signal(signal.SIGALRM, hang)
        signal.setitimer(signal.ITIMER_REAL, self.TIMEOUT)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as exc:  # argparse: --help (0) and its own usage errors (2)
                code = exc.code
            except UnicodeEncodeError as exc:  # a message a terminal cannot show
                raise _CliCrash(f"UnicodeEncodeError: {exc}") from None
            except _Hang:
                raise _CliCrash(f"took over {self.TIMEOUT} s") from None
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, old)
        err.flush()
        text = err.buffer.getvalue().decode("utf-8").strip()
        if code not in (0, 2):  # 1 is a run's failure, and nothing runs here: bad input taken for one
            raise _CliCrash(f"exit {code}: {text[-300:]}")
        if code == 2:
            lines = text.splitlines()
            if len(lines) != 1 or not _one_line(lines[0]) or not lines[0].startswith("hqflow"):
                raise _CliCrash(f"exit 2 without one clean line: {text[:300]!r}")
            raise _CliRefused(lines[0])


class _CliCrash(Exception):
    pass


class _CliRefused(GraphError):  # judged as a rejection: exit 2 with one clean line
    pass


_CLI: list[_Cli] = []


def _run_cli(argv: list[str]) -> None:
    if not _CLI:
        _CLI.append(_Cli())
    _CLI[0](argv)


FAMILIES = {
    "graph": (_mutate_graph, _load_graph),
    "circuit": (lambda rng, seeds: _random_circuit(rng), _build_circuit),
    "cli": (lambda rng, seeds: _random_argv(rng), _run_cli),
    "numbers": _hostile((int, float), HUGE, [str(v) for v in HUGE[:5]] + ["1e400", "-1e999", "9" * 5000]),
    "text": _hostile(str, HOSTILE_TEXT, HOSTILE_TEXT + ["latin1.json", "caf\udce9.json"]),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1,000 cases per family (default 10,000)")
    ap.add_argument("--cases", type=int, default=None, help="cases per family")
    ap.add_argument("--family", default=",".join(FAMILIES), help="comma-separated: " + ",".join(FAMILIES))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    families = [f for f in args.family.split(",") if f]
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        ap.error(f"unknown family {unknown[0]!r}; known: {', '.join(FAMILIES)}")
    cases = args.cases or (1000 if args.quick else 10000)
    seeds = _seed_documents()
    figures: dict = {"cases": 0, "accepted": 0, "rejected": 0, "crashes": 0}
    print(f"{'family':<10} {'cases':>7} {'accepted':>9} {'rejected':>9} {'crashes':>8} {'seconds':>8}")
    for fam in families:
        make, run = FAMILIES[fam]
        rng = random.Random(args.seed)
        counts = {"accepted": 0, "rejected": 0, "crash": 0}
        seen: set[str] = set()
        start = time.perf_counter()
        swept = _cli_sweep() if fam == "cli" else []  # every option of train, run, plan and eval: each hostile value
        for argv in [BASE[c] for c in SWEPT] if swept else []:  # each sweep's base must run, or it tests nothing
            if _judge(run, argv)[0] != "accepted":
                counts["crash"] += 1
                print(f"  crash ({fam}): the sweep's base vector is refused: {argv}", file=sys.stderr)
        n = max(cases, len(swept))
        for k in range(n):
            case = swept[k] if k < len(swept) else make(rng, seeds)
            outcome, why = _judge(run, case)
            counts[outcome] += 1
            if outcome == "crash" and why[:60] not in seen:
                seen.add(why[:60])
                print(f"  crash ({fam}): {why}\n    input: {repr(case)[:300]}", file=sys.stderr)
        seconds = time.perf_counter() - start
        print(f"{fam:<10} {n:>7} {counts['accepted']:>9} {counts['rejected']:>9} {counts['crash']:>8} "
              f"{seconds:>8.1f}")
        figures.update({f"{fam}_cases": n, f"{fam}_accepted": counts["accepted"],
                        f"{fam}_rejected": counts["rejected"], f"{fam}_crashes": counts["crash"]})
        if swept:
            figures["cli_swept_options"] = sum(1 for c in SWEPT for o in _OPTIONS["options"][c] if o[2])
            figures["cli_swept_values"] = len(HOSTILE_ARGS)
        figures["cases"] += n
        figures["accepted"] += counts["accepted"]
        figures["rejected"] += counts["rejected"]
        figures["crashes"] += counts["crash"]
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
