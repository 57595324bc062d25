"""A fragment defined in a script's __main__ runs under every executor, Ray included (sent by value)."""
import subprocess
import sys

import pytest

SCRIPT = '''
import numpy as np
import hqflow as hq

SCALE = 3.0

def normalize(x):
    return {"y": np.asarray(x) * SCALE}

if __name__ == "__main__":
    pipe = hq.Pipeline("script")
    pipe.input("x", "array")
    pipe.preprocess(normalize, outputs={"y": "array"})
    pipe.output("normalize.y")
    for executor in ("sync", "local", "ray"):
        out = hq.run(pipe.build(), [{"x": [1.0, 2.0]}, {"x": [3.0]}], executor=executor, ray_num_cpus=2)
        print(executor, [float(v) for y in out.column("y") for v in y])
'''


@pytest.mark.ray
@pytest.mark.own_ray
def test_a_scripts_fragment_runs_under_ray(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.split(" ")[0] in ("sync", "local", "ray")]
    assert lines == [f"{e} [3.0, 6.0, 9.0]" for e in ("sync", "local", "ray")]
