"""A backend name becomes an instance once per process: ``hqflow train --backend NAME`` makes the in-process
backend once, and a job pool's members once each (issue 24's "resolved once")."""
import pytest
from hqflow.backends import get_backend, register_backend

from hqflow.cli import main

MADE = []


def counting(wrapped="compiled", **options):
    """A registered factory that counts the backends it makes (module level: any process can import it)."""
    MADE.append(wrapped)
    return get_backend(wrapped, **options)


@pytest.fixture
def registered():
    register_backend("counting", counting, listed=False)
    MADE.clear()
    yield MADE
    MADE.clear()


def test_an_in_process_backend_is_made_once_per_process(registered, tmp_path, capsys):
    argv = ["train", "cartpole", "--backend", "counting", "--episodes", "6", "--set", "n_layers=1", "--set",
            "batch_episodes=2", "--run-dir", str(tmp_path / "a"), "--json", "--no-tensorboard"]
    assert main(argv) == 0, capsys.readouterr().err
    assert registered == ["compiled"]  # the driver's one instance served the actor and the learner
    assert main(["train", "--resume", str(tmp_path / "a")]) == 0  # (complete: nothing more is made)
    assert registered == ["compiled"]


def test_a_job_pool_makes_each_member_once(registered, tmp_path, capsys):
    argv = ["train", "cartpole", "--backend", "counting", "--backend-opt", "wrapped=emulated-qpu", "--backend-opt",
            "per_job=0", "--pool", "2", "--episodes", "2", "--set", "n_layers=1", "--set", "batch_episodes=2",
            "--run-dir", str(tmp_path / "b"), "--json", "--no-tensorboard"]
    assert main(argv) == 0, capsys.readouterr().err
    assert registered == ["emulated-qpu", "emulated-qpu"]  # one per member: the pool's, and nothing else
