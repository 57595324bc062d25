"""Elastic training: the pool follows a resources file while the run goes on (hqflow.cli.resources). With exact
backends at staleness 0 the run ends bit-identical to an undisturbed one; a bad file changes nothing."""
import json
import os
import threading

import pytest
import torch

from hqflow.engine.distribution import Pipelined
from hqflow.cli.resources import ResourceWatcher
from hqflow.workloads.rl import reinforce, runner

CFG = reinforce.Config(seed=1, backend="qpu", max_episodes=40, batch_episodes=4, n_layers=1, stop_when_solved=False)


def _member(name, **options):
    return ["emulated-qpu", {"per_job": 0.005, "name": name, **options}]


def _write(path, *members):
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        fh.write(members[0] if isinstance(members[0], str) else json.dumps({"pools": {"qpu": list(members)}}))
    os.replace(tmp, path)  # a new file, as an editor or a controller writes it


def _same(a, b):
    assert a["returns"] == b["returns"]
    assert all(torch.equal(a["params"][k], b["params"][k]) for k in a["params"])


@pytest.fixture(scope="module")
def undisturbed():
    pool = [tuple(_member("a")), tuple(_member("b"))]
    return runner.train("reinforce", CFG, "sync", backends={"qpu": pool}, tensorboard=False)


@pytest.mark.parametrize("distribution", ["sync", Pipelined(staleness=0)])
def test_members_added_and_removed_mid_run_change_nothing(undisturbed, tmp_path, distribution):
    """QPU a hangs on its first job, so the run waits until a change takes a out (its job runs again on the
    others); then c joins, and later a and b leave, while updates go on."""
    path = tmp_path / "pool.json"
    _write(path, _member("a", hang_jobs=[0]), _member("b"))
    lines = []
    watcher = ResourceWatcher(path, say=lines.append)
    threading.Timer(0.3, lambda: _write(path, _member("b"), _member("c"))).start()  # found by polling

    def progress(episodes, _):
        if episodes == 20:
            _write(path, _member("c"))
            threading.Timer(0.05, watcher.poke).start()  # as SIGHUP does: read it now, mid-update

    out = runner.train("reinforce", CFG, distribution, run_dir=tmp_path / "run", backends=watcher.pools,
                       resources=watcher, progress=progress, tensorboard=False)
    _same(undisturbed, out)
    log = [json.loads(line) for line in (tmp_path / "run" / "resources.jsonl").read_text().splitlines()]
    assert [e["event"] for e in log] == ["start", "change", "change"]
    first, second = log[1], log[2]
    assert (first["added"], first["removed"], first["update"]) == (1, 1, 0) and first["requeued"] >= 1
    assert (second["added"], second["removed"], second["backends"]) == (0, 1, [_member("c")])
    assert 5 <= second["update"] < 10  # mid-run: 10 updates in all
    lines = [line for line in lines if "no change" not in line]  # the poll may find the file before the poke
    assert lines[0].startswith("hqflow: resources: pool 'qpu' now 2 backends (+1, -1); ")
    assert lines[0].endswith(" in flight run again on the others" if first["requeued"] > 1 else
                             "1 job in flight runs again on the others")
    assert lines[1].startswith("hqflow: resources: pool 'qpu' now 1 backend (+0, -1)") and len(lines) == 2
    assert json.loads((tmp_path / "run" / "config.json").read_text())["backends"] == {"qpu": [_member("c")]}
    lanes = {s.row.at(None) for s in out["spans"] if s.resource == "qpu:qpu"}
    assert {"qpu:a#0", "qpu:b#1", "qpu:c#2"} <= lanes
    assert any(s.outcome == "cancelled" and s.row == "qpu:a#0" for s in out["spans"])


def test_a_bad_file_or_an_empty_pool_changes_nothing(undisturbed, tmp_path):
    path = tmp_path / "pool.json"
    _write(path, _member("a"), _member("b"))
    lines, said = [], threading.Event()
    watcher = ResourceWatcher(path, say=lambda line: (lines.append(line), said.set()))
    bad = {4: "{not json", 8: json.dumps({"pools": {"qpu": []}}), 12: json.dumps({"pools": {"qpu": ["nosuch"]}}),
           16: json.dumps({"pools": {"gpu": ["emulated-qpu"]}}),
           20: json.dumps({"pools": {"qpu": [["emulated-qpu", {"per_jobb": 1}]]}})}

    def progress(episodes, _):
        if episodes in bad:
            said.clear()
            _write(path, bad[episodes])
            watcher.poke()
            assert said.wait(10)

    out = runner.train("reinforce", CFG, "sync", run_dir=tmp_path / "run", backends=watcher.pools,
                       resources=watcher, progress=progress, tensorboard=False)
    _same(undisturbed, out)
    lines = [line for k, line in enumerate(lines) if k == 0 or line != lines[k - 1]]  # poll and poke may both read
    assert len(lines) == 5 and all(line.endswith("; the pools stay as they are") for line in lines), lines
    for line, part in zip(lines, ["is not a JSON document", "pool 'qpu' has no member",
                                  "member 0 (nosuch): unknown backend", "this run has no backend pool 'gpu'",
                                  "member 0 (emulated-qpu)"]):
        assert part in line, line
    log = (tmp_path / "run" / "resources.jsonl").read_text().splitlines()
    assert len(log) == 1  # the start: no change applied


def test_an_in_process_backend_has_no_pool_to_change(tmp_path):
    path = tmp_path / "pool.json"
    path.write_text('{"pools": {"compiled": ["compiled"]}}')
    with pytest.raises(ValueError, match="runs in process"):
        runner.train("reinforce", reinforce.Config(max_episodes=4, batch_episodes=2, n_layers=1),
                     resources=ResourceWatcher(path), tensorboard=False)


def test_ray_workers_keep_their_pool_so_resources_need_a_local_distribution(tmp_path):
    from hqflow.engine.distribution import RayActors

    path = tmp_path / "pool.json"
    _write(path, _member("a"))
    watcher = ResourceWatcher(path)
    with pytest.raises(ValueError, match="runs in this process, not ray-actors on Ray"):
        runner.train("reinforce", CFG, RayActors(staleness=0), backends=watcher.pools, resources=watcher,
                     tensorboard=False)
