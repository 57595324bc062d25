"""Every example in examples/ runs, at small size, as a user would run it."""
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
# the others take --quick; and where --quick leaves the size to another option, the smallest that runs every line
QUICK = {"quickstart.py": [], "classifier_moons.py": ["--quick", "--samples", "20", "--batch-size", "2"],
         "qaoa_maxcut.py": ["--quick", "--steps", "3"]}


@pytest.mark.parametrize("script", sorted(p.name for p in EXAMPLES.glob("*.py")))
def test_example_runs(script, tmp_path):
    args = QUICK.get(script, ["--quick"])
    proc = subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip(), "an example should print its results"
