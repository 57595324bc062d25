"""The command line: --help everywhere, exit 2 with one line on bad usage or input."""
import json
import subprocess
import sys

import numpy as np
import pytest

import hqflow as hq
from hqflow.cli import main
from hqflow.ir import Circuit


def negate(x):
    return -x


def _graph():
    c = Circuit(2, name="c")
    x, w = c.inputs("x", 2), c.weights("w", 1)
    c.ry(x[0], 0).ry(x[1], 1).cx(0, 1).rz(w[0], 1)
    pipe = hq.Pipeline("cli-demo")
    pipe.input("x", "array")
    pipe.preprocess(negate, name="neg", outputs={"out": "array"})
    pipe.connect("input.x", "neg.x")
    pipe.execute("circuit", c.build(observables=["Z0 Z1"]))
    pipe.connect("neg.out", "circuit.inputs")
    pipe.input("w", "array").connect("input.w", "circuit.weights")
    return pipe


def _err(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_help_for_every_command():
    for argv in (["--help"], ["backends", "--help"], ["inspect", "--help"], ["run", "--help"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 0


def test_console_script_help_lists_commands():
    out = subprocess.run([sys.executable, "-m", "hqflow.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    for cmd in ("backends", "inspect", "run"):
        assert cmd in out.stdout


@pytest.mark.parametrize("argv", [[], ["bogus"], ["inspect"], ["run"], ["run", "vqe", "--steps", "-3"],
                                  ["run", "vqe", "--steps", "many"]])
def test_bad_usage_exits_2_with_one_line(argv, capsys):
    assert main(argv) == 2
    assert _err(capsys).startswith("hqflow: error:")


def test_run_unknown_workload_and_backend(capsys):
    assert main(["run", "nope"]) == 2
    assert "nope" in _err(capsys)
    assert main(["run", "qaoa", "--backend", "no-such-backend"]) == 2
    assert "unknown backend 'no-such-backend'" in _err(capsys)


def test_backends_lists_reference(capsys):
    assert main(["backends", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    ref = next(r for r in rows if r["name"] == "reference")
    assert ref["available"] and ref["max_qubits"] >= 8 and ref["exact"]


def test_inspect_missing_file(tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in _err(capsys)


def test_inspect_malformed_json(tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text('{"fragments": [,]}')
    assert main(["inspect", str(path)]) == 2
    assert "not valid JSON" in _err(capsys)


def test_inspect_graph_with_missing_fragment(tmp_path, capsys):
    doc = json.loads(_graph().build().to_json())
    doc["edges"][0]["src"] = ["ghost", "out"]
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc))
    assert main(["inspect", str(path)]) == 2
    assert "unknown fragment 'ghost'" in _err(capsys)


def test_inspect_valid_graph_prints_and_draws(tmp_path, capsys):
    path = tmp_path / "g.json"
    path.write_text(_graph().build().to_json())
    png = tmp_path / "g.png"
    assert main(["inspect", str(path), "--png", str(png)]) == 0
    out = capsys.readouterr().out
    assert "cli-demo" in out and "[execute" in out and "neg.out -> circuit.inputs" in out
    assert png.stat().st_size > 1000


@pytest.mark.parametrize("workload", ["vqe", "qaoa", "classifier"])
def test_run_workload_prints_json_figures_and_writes_out(workload, tmp_path, capsys):
    out = tmp_path / "result.json"
    assert main(["run", workload, "--steps", "2", "--seed", "1", "--json", "--out", str(out)]) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures and all(isinstance(v, (int, float, str, bool)) or v is None for v in figures.values())
    saved = json.loads(out.read_text())
    assert len(saved["history"]) == 2


def test_progress_bar_shows_scalar_outputs():
    import io

    from hqflow.progress import Progress

    buf = io.StringIO()
    with Progress(4, "demo", stream=buf) as bar:
        bar(2, {"loss": 0.25, "weights": np.zeros(3)})
    line = buf.getvalue().strip()
    assert "2/4" in line and "loss=0.25" in line and "weights" not in line
