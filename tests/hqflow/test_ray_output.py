"""What starting a local Ray does: it prints nothing of Ray's own housekeeping (it is not the user's
business), and its workers run at this process's priority (Ray's niceness 15 starved them beside any
busy process: the suite's Ray runs took ten times longer at load 6)."""
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.own_ray]

SCRIPT = """
import os
from hqflow.engine.executors.ray import RayExecutor
import ray
RayExecutor(num_cpus=1)
print("worker niceness", ray.get(ray.remote(num_cpus=0)(lambda: os.nice(0)).remote()), "of", os.nice(0))
ray.shutdown()
print("started and stopped")
"""


def test_starting_ray_prints_no_token_authentication_notice():
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}  # Ray's default: token auth, with a notice
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "started and stopped" in proc.stdout
    assert "Token authentication" not in proc.stderr + proc.stdout, proc.stderr
    assert f"worker niceness {os.nice(0)} of {os.nice(0)}" in proc.stdout
