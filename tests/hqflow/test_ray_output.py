"""What starting Ray prints: nothing of Ray's own housekeeping (it is not the user's business)."""
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.ray

SCRIPT = """
from hqflow.executors import RayExecutor
import ray
RayExecutor(num_cpus=1)
ray.shutdown()
print("started and stopped")
"""


def test_starting_ray_prints_no_token_authentication_notice():
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}  # Ray's default: token auth, with a notice
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "started and stopped" in proc.stdout
    assert "Token authentication" not in proc.stderr + proc.stdout, proc.stderr
