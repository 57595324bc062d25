"""A run on a job backend under ``pipelined`` (staleness 1 and 2), stopped at any moment and resumed, ends as one
never stopped: every metrics row and the final parameters, bit for bit (issue 34, item 1); its budget holds
across the processes (item 29).

A SIGKILL leaves the run directory as it was at that instant, so "killed at moment m" is a copy of the directory
taken at m while the run goes on: the copies here are taken from the run's progress callback, right after an
update's row (with or without its checkpoint) and with the next rollout's jobs in flight; ``test_budget_kill.py``
kills real processes.
"""
import json
import shutil

import pytest
import torch

import hqflow as hq
from hqflow.engine.distribution import Pipelined
from hqflow.workloads.rl import reinforce, runner

CFG = reinforce.Config(n_layers=1, batch_episodes=3, max_episodes=18, seed=5, backend="qpu", shots=100,
                       gradient="spsa", stop_when_solved=False, dtype="float64", lr_in=0.5, lr_var=0.5, lr_out=0.5,
                       beta=5.0)  # large steps: a rollout on other parameters acts otherwise
POOL = {"qpu": [("emulated-qpu", {"wrapped": "compiled", "price_as": "ionq.qpu.aria-1", "seed": 3})]}


def _train(run_dir, staleness, **kw):
    return runner.train("reinforce", CFG, Pipelined(staleness=staleness), run_dir=run_dir, backends=POOL,
                        tensorboard=False, checkpoint_every=2, **kw)


def _rows(run_dir):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k != "seconds"} for line in lines]


def _same(a, b) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module", params=[1, 2], ids=["staleness1", "staleness2"])
def uninterrupted(request, tmp_path_factory):
    """A run never stopped, and copies of its directory taken after updates 1 (checkpointed), 2 and 4 (not)."""
    root, staleness = tmp_path_factory.mktemp(f"s{request.param}"), request.param
    done, moments = [], {1: "after_checkpoint", 2: "past_checkpoint", 4: "later"}

    def snapshot(_episodes, _shown):
        done.append(len(done))
        if done[-1] in moments:
            shutil.copytree(root / "run", root / moments[done[-1]])

    out = _train(root / "run", staleness, progress=snapshot)
    return staleness, root, out


@pytest.mark.parametrize("moment", ["after_checkpoint", "past_checkpoint", "later"])
def test_a_run_killed_at_any_moment_resumes_to_the_same_rows_and_parameters(uninterrupted, moment):
    staleness, root, out = uninterrupted
    assert len(_rows(root / "run")) == 6 and all("spend" in r and "circuits_total" in r for r in _rows(root / "run"))
    resumed = runner.train("reinforce", resume=True, run_dir=root / moment, backends=POOL, tensorboard=False)
    assert _rows(root / moment) == _rows(root / "run")
    assert _same(resumed["params"], out["params"]) and resumed["returns"] == out["returns"]
    assert resumed["usage"] == out["usage"]  # the updates' jobs, however many processes ran them


def test_a_budget_stop_resumed_ends_as_one_never_stopped(uninterrupted, tmp_path):
    staleness, root, out = uninterrupted
    budget = 0.45 * out["spend"]
    with pytest.raises(hq.RunFailed, match="budget reached") as stop:
        _train(tmp_path / "run", staleness, budget=budget)
    paid = stop.value.result.extra["spend"]
    assert paid <= budget  # the ledger never passes the budget
    resumed = runner.train("reinforce", resume=True, run_dir=tmp_path / "run", backends=POOL, tensorboard=False,
                           budget=10 * out["spend"])
    assert _rows(tmp_path / "run") == _rows(root / "run")
    assert _same(resumed["params"], out["params"])
    # what both processes paid: the updates' jobs, and those the stop cut short (paid again when redone here)
    assert resumed["spend"] >= out["spend"] and resumed["spend"] >= paid
