"""The code passes ruff, pinned in the dev extra, with the rules in pyproject.toml."""
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e '.[dev]' installs it)")
    proc = subprocess.run([ruff, "check", "--no-cache", "--output-format", "concise", str(ROOT)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-1000:]


def _functions(paths):
    import ast

    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path, node


def test_the_cli_and_the_rl_trainer_have_no_function_over_80_lines():
    paths = [*ROOT.glob("cli/*.py"), *ROOT.glob("workloads/rl/*.py")]
    long = [f"{p.relative_to(ROOT)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"
            for p, n in _functions(paths) if n.end_lineno - n.lineno + 1 > 80]
    assert not long, long


def test_one_training_driver_the_algorithms_have_no_train_loop():
    files = [ROOT / "workloads" / "rl" / f"{name}.py" for name in ("reinforce", "ppo", "dqn")]
    assert not [f"{p.name}:{n.lineno}" for p, n in _functions(files) if n.name == "train"]
