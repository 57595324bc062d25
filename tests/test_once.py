"""Concepts written once, checked on the source (as tests/test_layers.py checks the imports): a backend spec
becomes a backend in one function, ``KEY=VALUE`` is parsed in one, and the gradient methods' names are written
in one type that every use dispatches on."""
import ast
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
LIBRARY = ("ir", "backends", "hqflow", "workloads", "cli")  # what is installed: not tests, examples or benchmarks


def _functions_calling(test, folders=LIBRARY) -> set[tuple[str, str]]:
    """``(file, innermost enclosing function or "<module>")`` of every call for which ``test(call)`` holds."""
    found = set()

    def visit(node, where, path):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else where
            if isinstance(child, ast.Call) and test(child):
                found.add((path, where))
            visit(child, inner, path)

    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            visit(ast.parse(path.read_text()), "<module>", path.relative_to(ROOT).as_posix())
    return found


def _named(call: ast.Call, name: str) -> bool:
    f = call.func
    return (isinstance(f, ast.Name) and f.id == name) or (isinstance(f, ast.Attribute) and f.attr == name)


def test_a_backend_spec_becomes_a_backend_in_one_function():
    """``get_backend(`` is called in exactly one function of the installed code (ir, backends, hqflow,
    workloads), ``backends.make_backend``: the registry's own function, whatever the spec's form. Everything
    else (the torch layer, the engine's executors and Ray actors, the CLI's members, resources files, the
    RL placement, backends that wrap another) asks ``make_backend``. Examples and benchmarks are users' code."""
    assert _functions_calling(lambda call: _named(call, "get_backend")) == {("backends/__init__.py", "make_backend")}


def test_key_value_is_parsed_in_one_function():
    """``.partition("=")`` (a ``KEY=VALUE`` flag taken apart) happens in ``cli.pool.key_value`` alone: --set,
    --backend-opt and --azure-opt all go through it."""
    def splits_at_equals(call):
        return _named(call, "partition") and call.args and isinstance(call.args[0], ast.Constant) \
            and call.args[0].value == "="
    assert _functions_calling(splits_at_equals, ("hqflow", "workloads", "cli")) == {("cli/pool.py", "key_value")}


NAMES = {"param-shift", "spsa", "twin"}


def test_the_gradient_methods_names_are_written_once():
    """The names are written in ``GradientMethod`` alone (a docstring may mention them): no other string
    ``"param-shift"`` in the installed code, and no comparison with any of the three names (code dispatches on
    the type's members; ``"spsa"`` elsewhere is the keyword of SPSA's settings, never a method)."""
    shift, compared = [], []
    for folder in LIBRARY:
        for path in sorted((ROOT / folder).rglob("*.py")):
            where = path.relative_to(ROOT).as_posix()
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and node.value == "param-shift":
                    shift.append(f"{where}:{node.lineno}")
                if isinstance(node, ast.Compare) and any(
                        isinstance(x, ast.Constant) and x.value in NAMES for x in [node.left, *node.comparators]):
                    compared.append(f"{where}:{node.lineno}")
    assert len(shift) == 1 and shift[0].startswith("ir/nodes.py:"), shift
    assert not compared


def test_a_gradient_method_is_its_name():
    """A ``GradientMethod`` equals, prints, formats and saves to JSON as its name, so graphs, configs and run
    directories that hold names (config.json) load as they did; configs take the names users write and hold
    the type; an unknown name is one line naming the known ones."""
    from hqflow.gradients import GRADIENTS, METHODS, GradientMethod, gradient_method
    from hqflow.ir.graph import GRADIENTS as GRAPH_GRADIENTS
    from hqflow.workloads import vqe
    from hqflow.workloads.rl import reinforce

    assert [m.value for m in METHODS] == ["param-shift", "spsa", "twin"]
    assert GRADIENTS == ("param-shift", "spsa") and GRAPH_GRADIENTS == (None, *GRADIENTS)
    spsa = GradientMethod.SPSA
    assert spsa == "spsa" and str(spsa) == f"{spsa}" == "spsa" and repr(spsa) == "'spsa'" and json.dumps(spsa) == '"spsa"'
    assert {"spsa": 1}[spsa] == 1 and GradientMethod("twin") is GradientMethod.TWIN
    cfg = reinforce.Config(gradient="spsa")
    assert cfg.gradient is spsa and json.loads(json.dumps(dataclasses.asdict(cfg)))["gradient"] == "spsa"
    assert reinforce.Config(**json.loads(json.dumps(dataclasses.asdict(cfg)))) == cfg
    assert vqe.Config().gradient is GradientMethod.PARAM_SHIFT and "gradient='spsa'" in repr(vqe.Config(gradient="spsa"))
    with pytest.raises(ValueError, match="^unknown gradient 'twin'; known: param-shift, spsa$"):
        gradient_method("twin", GRADIENTS)
    with pytest.raises(ValueError, match="^unknown gradient 'foo'; known: param-shift, spsa$"):
        vqe.Config(gradient="foo")


def test_estimate_is_the_estimators_themselves():
    """``estimate`` (the one dispatch) gives what ``param_shift`` and ``spsa`` give, row for row; a twin has no
    rows of its own."""
    from hqflow.gradients import Spsa, estimate, param_shift, spsa
    from hqflow.ir import Circuit

    c = Circuit(2)
    x, w = c.inputs("x", 2), c.weights("w", 2)
    t = c.rx(x[0], 0).ry(w[0], 0).rx(x[1], 1).rz(w[1], 1).cz(0, 1).build(observables=["Z0 Z1"])
    xs, ws = np.array([[0.1, 0.2], [0.3, -0.4]]), np.array([0.5, 0.6])
    for got, want in [(estimate("param-shift", t, xs, ws, wrt="both", seed=3), param_shift(t, xs, ws, wrt="both", seed=3)),
                      (estimate("spsa", t, xs, ws, settings=Spsa(3, 0.2), seed=5),
                       spsa(t, xs, ws, samples=3, epsilon=0.2, center=False, seed=5)),
                      (estimate("spsa", t, xs, ws, seed=5), spsa(t, xs, ws, seed=5))]:
        assert np.array_equal(got[0].inputs, want[0].inputs) and np.array_equal(got[0].weights, want[0].weights)
    with pytest.raises(ValueError, match="unknown gradient 'twin'"):
        estimate("twin", t, xs, ws)
