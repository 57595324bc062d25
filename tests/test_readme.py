"""The README stays true: its commands match CI, and its example runs."""
import re
import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _bash_blocks() -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", README, re.S)]


def test_ci_runs_the_readme_test_command_unchanged():
    ci_line = [ln for ln in (ROOT / ".ci/run").read_text().splitlines() if ln and not ln.startswith(("#", "set ", "cd "))]
    assert len(ci_line) == 1
    assert ci_line[0] in _bash_blocks()
    assert "pytest" in ci_line[0]


def test_readme_has_two_setup_commands_installing_torch_first():
    setup = [b for b in _bash_blocks() if "pip install" in b]
    assert len(setup) == 2
    for cmd in setup:
        assert cmd.index("torch==2.13.0") < cmd.index("pip install -q .") if "pip install -q ." in cmd else True
        assert "torch==2.13.0" in cmd
    assert any(cmd.endswith("hqflow train cartpole") for cmd in setup)


def test_readme_example_runs(capsys):
    block = re.findall(r"```python\n(.*?)```", README, re.S)[0]
    assert "Pipeline" in block
    namespace = runpy.run_path(str(_write(block)), run_name="readme_example")
    losses = namespace["result"].column("loss")
    assert losses[-1] < 0.5 * losses[0]


def test_quickstart_example_matches_readme_and_trains(capsys):
    namespace = runpy.run_path(str(ROOT / "examples/quickstart.py"), run_name="quickstart")
    losses = namespace["result"].column("loss")
    assert losses[-1] < 0.1 < losses[0]


def _write(code: str) -> Path:
    import tempfile

    path = Path(tempfile.mkdtemp()) / "readme_example.py"
    path.write_text(code)
    return path


def test_readme_torch_layer_snippet_trains_a_classifier():
    block = [b for b in re.findall(r"```python\n(.*?)```", README, re.S) if "QuantumLayer" in b][0]
    namespace = runpy.run_path(str(_write(block)), run_name="readme_torch")
    assert namespace["accuracy"] >= 0.9


def test_readme_feature_map_snippet_matches_statevector_and_default_qubit():
    import numpy as np
    import pennylane as qml
    from qiskit.quantum_info import SparsePauliOp, Statevector

    block = [b for b in re.findall(r"```python\n(.*?)```", README, re.S) if "zz_feature_map" in b][0]
    ns = runpy.run_path(str(_write(block)), run_name="readme_feature_maps")
    circuit, x = ns["fmap"].compose(ns["ansatz"]), ns["x"]
    params = list(ns["fmap"].parameters) + list(ns["ansatz"].parameters)
    zz = SparsePauliOp.from_sparse_list([("ZZ", [0, 1], 1.0)], 2)
    expected = [Statevector(circuit.assign_parameters(dict(zip(params, list(row[:2]) + [0.1] * 4))))
                .expectation_value(zz).real for row in x]
    np.testing.assert_allclose(ns["zz_values"][:, 0], expected, atol=1e-5)
    dev = qml.device("default.qubit")
    expected = [float(qml.QNode(ns["embed"], dev)(row, [0.3])) for row in x]
    np.testing.assert_allclose(ns["amplitude_values"][:, 0], expected, atol=1e-5)


def test_readme_lists_every_span_field_with_its_json_type():  # issue 34, item 23
    """The spans.json table names each of Span's fields once, with a type the file reader takes for it."""
    from dataclasses import fields

    from hqflow.trace import _FIELD_TYPES, Span

    table = README[README.index("| field | type | what |"):].split("\n\n")[0].splitlines()[2:]
    kinds = {"string": str, "integer": int, "number": float, "lane": dict, "object": dict, "null": type(None)}
    listed = {}
    for row in table:
        names, kind = row.split("|")[1:3]
        for name in re.findall(r"`(\w+)`", names):
            assert name not in listed, f"{name} listed twice"
            listed[name] = {kinds[k] for k in kind.strip().split(" or ")}
    assert sorted(listed) == sorted(f.name for f in fields(Span))
    for name, types in listed.items():
        accepted = set(_FIELD_TYPES[name])
        assert types <= accepted and (type(None) in types) == (type(None) in accepted), name
