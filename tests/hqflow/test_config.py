"""Config fields are checked at construction: type and range, the field named in a one-line error."""
from dataclasses import dataclass

import pytest

from hqflow.cli import main
from hqflow.common.config import check_fields


@dataclass(frozen=True)
class Demo:
    n: int = 1
    rate: float = 0.5
    name: str = "a"
    flag: bool = True
    width: int | None = None
    names: tuple[str, ...] | None = None

    def __post_init__(self):
        check_fields(self, {"n": (1, 10), "rate": (0, 1, "(]"), "width": (1, None)})


@pytest.mark.parametrize("kwargs, message", [
    ({"n": "batch"}, "n must be an integer >= 1 and <= 10, got 'batch'"),
    ({"n": True}, "n must be an integer"),
    ({"n": 10**30}, "n must be an integer >= 1 and <= 10"),
    ({"rate": 0}, "rate must be a number > 0 and <= 1, got 0"),
    ({"rate": float("nan")}, "rate must be a number"),
    ({"name": ["Z0"]}, "name must be a string"),
    ({"flag": "plain"}, "flag must be true or false"),
    ({"width": 0}, "width must be an integer >= 1, or null, got 0"),
    ({"names": ["a", 1]}, "names must be a list of strings"),
])
def test_bad_fields_are_named(kwargs, message):
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        Demo(**kwargs)


def test_good_fields_pass_and_lists_are_frozen():
    d = Demo(n=3, rate=1, width=None, names=["x", "y"])
    assert d.names == ("x", "y") and d.rate == 1


@pytest.mark.parametrize("algo, setting, field", [
    ("reinforce", "lr_in=abc", "lr_in"), ("reinforce", "n_layers=abc", "n_layers"), ("reinforce", "n_layers=0", "n_layers"),
    ("reinforce", "gamma=abc", "gamma"), ("reinforce", "n_layers=" + "1" * 31, "n_layers"),
    ("reinforce", 'n_qubits={"a": 1}', "n_qubits"), ("reinforce", 'seed="reference"', "seed"),
    ("reinforce", 'beta="plain"', "beta"), ("reinforce", 'lr_out=["Z0"]', "lr_out"),
    ("ppo", "update_epochs=1.5", "update_epochs"), ("reinforce", "threads=1e309", "threads"),
    ("reinforce", "backend=NaN", "backend"), ("dqn", "memory=-5", "memory"),
])
def test_train_refuses_bad_settings_before_making_a_run_directory(algo, setting, field, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "cartpole", "--algo", algo, "--set", setting, "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"error: {field} must be" in err
    assert not run.exists()


def test_a_negative_seed_is_refused(tmp_path, capsys):
    assert main(["train", "cartpole", "--seed", "-1", "--run-dir", str(tmp_path / "r")]) == 2
    assert "--seed: expected an integer >= 0, got -1" in capsys.readouterr().err
