"""hq.run(..., run_dir=...): checkpoints of loop values and stream position; a run killed with SIGKILL
resumes to the result of an uninterrupted run; Ctrl-C stops at once and says how to continue."""
import dataclasses
import pickle
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import hqflow as hq
from hqflow.engine import checkpoint
from hqflow.engine.checkpoint import CheckpointError, Record
from hqflow.engine.ports import PortRef
from hqflow.engine.window import Versions
from hqflow.workloads import synthetic

CFG = synthetic.Config(staleness=0, backend="qpu", matrix=96, repeats=300)  # a learner step of tens of ms
STEPS = 24
BACKENDS = {"qpu": ("emulated-qpu", {"per_job": 0.002})}

SCRIPT = textwrap.dedent("""
    import sys
    import hqflow as hq
    from hqflow.workloads import synthetic
    cfg = synthetic.Config(staleness=0, backend="qpu", matrix=96, repeats=int(sys.argv[2]))
    hq.run(synthetic.build_graph(cfg), synthetic.stream({steps}, cfg), backends={{"qpu": ("emulated-qpu", {{}})}},
           run_dir=sys.argv[1], seed=5)
    print("finished")
""")


def _clean(cfg=CFG, steps=STEPS, **kw):
    return hq.run(synthetic.build_graph(cfg), synthetic.stream(steps, cfg), backends=BACKENDS, seed=5, **kw)


def _same(a, b):
    assert a.outputs == b.outputs  # floats compared exactly
    np.testing.assert_array_equal(a.state["learn.weights"], b.state["learn.weights"])


def _steps_saved(run_dir) -> int:
    try:
        return pickle.loads((run_dir / "state.pkl").read_bytes())["steps"]
    except (OSError, EOFError, pickle.UnpicklingError):
        return 0


def _script(tmp_path, steps=STEPS):
    path = tmp_path / "pipeline.py"
    path.write_text(SCRIPT.format(steps=steps))
    return path


def test_a_run_killed_with_sigkill_resumes_to_the_uninterrupted_result(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, str(_script(tmp_path)), str(run_dir), str(CFG.repeats)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while _steps_saved(run_dir) < 5 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read()[-2000:]  # killed mid-run, not finished
    done = _steps_saved(run_dir)
    assert 5 <= done < STEPS
    resumed = _clean(run_dir=str(run_dir), resume=True)
    _same(resumed, _clean())
    assert resumed.extra["completed_steps"] == STEPS
    # the resumed part ran only the steps after the checkpoint
    assert min(s.step for s in resumed.spans) == done


@pytest.mark.parametrize("executor", ["sync", "local"])
def test_a_finished_run_resumes_to_its_result_without_running(tmp_path, executor):
    first = _clean(steps=6, run_dir=str(tmp_path / "run"), executor=executor)
    again = _clean(steps=6, run_dir=str(tmp_path / "run"), executor=executor, resume=True)
    _same(again, first)
    assert again.spans == []


def test_checkpoints_every_k_steps_and_a_torn_outputs_file_is_cut_back(tmp_path):
    run_dir = tmp_path / "run"
    _clean(steps=7, run_dir=str(run_dir), checkpoint_every=3)
    assert _steps_saved(run_dir) == 7  # the end of a run is always saved
    with open(run_dir / "outputs.pkl", "ab") as fh:
        fh.write(pickle.dumps((7, {"loss": 1.0}))[:-5])  # a kill while appending a step's outputs
    _same(_clean(steps=7, run_dir=str(run_dir), resume=True), _clean(steps=7))


def test_resume_refuses_what_is_not_the_same_run(tmp_path):
    run_dir = str(tmp_path / "run")
    _clean(steps=4, run_dir=run_dir)
    with pytest.raises(CheckpointError, match="holds a run's checkpoint: pass resume=True"):
        _clean(steps=4, run_dir=run_dir)
    with pytest.raises(CheckpointError, match="ran with seed=5; resume it with that seed, not 6"):
        hq.run(synthetic.build_graph(CFG), synthetic.stream(4, CFG), backends=BACKENDS, seed=6, run_dir=run_dir,
               resume=True)
    other = synthetic.Config(staleness=0, backend="qpu", n_qubits=3)
    with pytest.raises(CheckpointError, match="checkpoint of another graph"):
        hq.run(synthetic.build_graph(other), synthetic.stream(4, other), backends=BACKENDS, seed=5, run_dir=run_dir,
               resume=True)
    with pytest.raises(CheckpointError, match="the stream ended after 2 items"):
        _clean(steps=2, run_dir=run_dir, resume=True)
    with pytest.raises(CheckpointError, match="the stream differs"):
        hq.run(synthetic.build_graph(CFG), synthetic.stream(4, CFG, seed=9), backends=BACKENDS, seed=5,
               run_dir=run_dir, resume=True)
    with pytest.raises(ValueError, match="resume=True needs the run_dir"):
        _clean(steps=2, resume=True)


@pytest.mark.parametrize("damage", [b"", b"garbage", pickle.dumps({"version": 99})])
def test_a_damaged_checkpoint_is_a_one_line_error(tmp_path, damage):
    run_dir = tmp_path / "run"
    _clean(steps=3, run_dir=str(run_dir))
    (run_dir / "state.pkl").write_bytes(damage)
    with pytest.raises(CheckpointError) as info:
        _clean(steps=3, run_dir=str(run_dir), resume=True)
    assert "state.pkl is damaged" in str(info.value) and "\n" not in str(info.value)


def test_ctrl_c_stops_at_once_and_says_how_to_continue(tmp_path):
    """A learner step of hours is running when SIGINT arrives: the process does not wait for it (an exit
    that waited would not come within the minute allowed, however busy the machine)."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, str(_script(tmp_path, steps=4)), str(run_dir), str(10**10)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not (run_dir / "outputs.pkl").exists() and time.time() < deadline:
            time.sleep(0.01)
        time.sleep(1.0)  # inside the first learner step
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail("the exit waited for the running fragment")
    finally:
        proc.kill()
    assert "finished" not in out
    assert "run interrupted after 0 steps; continue it with run_dir=" in err and "resume=True" in err


# -- the Checkpointer by itself: what the loop asks of the run directory ------------------------------
def _total(y, acc):
    return {"acc": acc + y}


def _loop_graph():
    pipe = hq.Pipeline("ckpt")
    pipe.input("y", "scalar")
    pipe.learn(_total, outputs={"acc": "scalar"})
    pipe.connect("input.y", "_total.y")
    pipe.loop("_total.acc", "_total.acc", init=0.0)
    pipe.output("_total.acc")
    return pipe.build()


def test_without_a_run_dir_nothing_is_recorded():
    from hqflow.engine.checkpoint import Checkpointer
    from hqflow.engine.window import Values

    graph = _loop_graph()
    ckpt, values = Checkpointer(hq.SchedulerConfig(), graph), Values(graph)
    ckpt.admit(0, {"y": 1.0})
    ckpt.finished({0: {"acc": 1.0}}, values, "run")
    assert ckpt.restore(iter([{"y": 1.0}]), values, {}) == 0
    assert (ckpt.run_id, ckpt.digests, ckpt.prefix) == (None, {}, 0)
    ckpt.close()


def test_the_finished_prefix_is_recorded_in_order_and_the_values_saved_when_due(tmp_path):
    from hqflow.engine.checkpoint import Checkpointer
    from hqflow.engine.window import Values

    graph, config = _loop_graph(), hq.SchedulerConfig(run_dir=str(tmp_path / "run"), checkpoint_every=2, seed=5)
    ckpt, values, outputs = Checkpointer(config, graph), Values(graph), {}
    items = [{"y": float(k)} for k in range(4)]
    for step, item in enumerate(items):
        ckpt.admit(step, item)
    for step in (1, 0, 2):  # steps finish out of order; the prefix grows in order
        values.produced("_total", step, {"acc": 10.0 * (step + 1)})
        outputs[step] = {"acc": 10.0 * (step + 1)}
        ckpt.finished(outputs, values, "run-1")
    assert ckpt.prefix == 3 and _steps_saved(tmp_path / "run") == 2  # every 2 steps: the save after step 1
    assert sorted(ckpt.digests) == [2, 3]  # the fingerprints a later save needs: the prefix's last step's on
    ckpt.stop(values, "run-1")  # the end is always saved
    assert _steps_saved(tmp_path / "run") == 3
    ckpt.close()

    config = dataclasses.replace(config, resume=True)
    resumed = Checkpointer(config, graph)
    values, outputs, stream = Values(graph), {}, iter(items)
    assert resumed.restore(stream, values, outputs) == 3 and resumed.run_id == "run-1"
    assert outputs == {k: {"acc": 10.0 * (k + 1)} for k in range(3)}
    assert values.newest()["_total.acc"] == 30.0 and next(stream) == items[3]  # the stream goes on after them
    resumed.close()
    for stream, message in ((items[:2], "the stream ended after 2 items"),
                            (items[:2] + [{"y": 9.0}], "the stream differs from the checkpointed run's: item 2")):
        again = Checkpointer(config, graph)
        with pytest.raises(CheckpointError, match=message):
            again.restore(iter(stream), Values(graph), {})
        again.close()


@pytest.mark.parametrize("staleness", [1, 2])
def test_at_staleness_k_step_i_takes_version_i_minus_k_and_a_run_killed_anywhere_goes_on_alike(tmp_path, staleness):
    """The version a step takes never depends on timing, and the checkpoint keeps the k versions before it: a kill
    (the run directory as it was at that instant, copied while the run goes on) resumes to the same outputs."""
    cfg = dataclasses.replace(CFG, staleness=staleness, repeats=20)
    copies = {4: "checkpointed", 5: "past_checkpoint"}

    def kill(done, _outputs):
        if done in copies:
            shutil.copytree(tmp_path / "run", tmp_path / copies[done])

    clean = _clean(cfg, run_dir=str(tmp_path / "run"), checkpoint_every=2, progress=kill)
    taken = {s.step: s.version for s in clean.spans if s.fragment == "circuit"}
    assert taken == {i: max(0, i - staleness) for i in range(STEPS)}
    for name in copies.values():
        _same(_clean(cfg, run_dir=str(tmp_path / name), checkpoint_every=2, resume=True), clean)


class _Sums(Record):
    """A workload's record: the totals of the steps it took, up to ``limit`` of them (then the run has ended)."""

    def __init__(self, limit, saved=()):
        self.limit, self.sums = limit, list(saved)

    def add(self, step, outputs):
        if len(self.sums) == self.limit:
            return False
        self.sums.append(outputs["acc"])
        return True

    def saved(self):
        return list(self.sums)


def test_a_workload_s_record_is_checkpointed_and_ends_the_prefix_where_it_ends_the_run(tmp_path):
    """Steps past the record's end still run (admitted before it), but the checkpoint stops at its end: its loop
    values are those after the record's last step, and a resume goes on from there (the graph may differ)."""
    run_dir, items = tmp_path / "run", [{"y": float(k)} for k in range(6)]
    record = _Sums(2)
    ran = hq.run(_loop_graph(), items, run_dir=str(run_dir), record=record, seed=1, checkpoint_every=5)
    assert len(ran.outputs) == 6 and record.sums == [0.0, 1.0]
    saved = checkpoint.load(run_dir / "checkpoint.pt")
    assert (saved["steps"], saved["record"], saved["graph"]) == (2, [0.0, 1.0], None)
    assert saved["state"] == {PortRef("_total", "acc"): Versions({2: 1.0})}
    assert not (run_dir / "outputs.pkl").exists() and not (run_dir / "state.pkl").exists()
    record = _Sums(4, saved["record"])
    hq.run(_loop_graph(), items, run_dir=str(run_dir), record=record, seed=1, resume=True)
    assert record.sums == [0.0, 1.0, 3.0, 6.0] and checkpoint.load(run_dir / "checkpoint.pt")["steps"] == 4
    with pytest.raises(CheckpointError, match="holds a run's checkpoint"):
        hq.run(_loop_graph(), items, run_dir=str(run_dir), record=_Sums(4), seed=1)
