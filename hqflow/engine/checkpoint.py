"""Checkpoints of a run: ``hq.run(..., run_dir=DIR)`` survives a kill and resumes with ``resume=True``; the RL
trainer's ``checkpoint.pt`` is this format too, with the trainer's own record in it (``Record``).

A run's steps finish out of order, but its *prefix* (the steps before the first unfinished one) only grows. When
it does, the newly finished steps' outputs are appended to ``outputs.pkl`` and, after every ``checkpoint_every``-th
step and when the run ends, fails or is interrupted, ``state.pkl`` is replaced (atomically) by the loop-carried
values after the prefix, its length (the stream position) and the run's identity. A resumed run skips that many
stream items, starts every loop edge from the saved value and numbers its steps on from there, so shot seeds and
job ids are those of an uninterrupted run: at every ``max_staleness`` the result is identical (``window.Values``:
the version a step takes never depends on timing).

* ``state.pkl``: ``{"version", "graph", "seed", "run_id", "steps", "state", "item", "record"}``, its ``state`` a
  list of ``[port, Versions]`` pairs, each port as an object (``PortRef.to_dict``), with the versions the next
  steps take at their ``max_staleness``, and its ``record`` the workload's (None without one); version 3, without
  a record, version 2, a value per port, and version 1, keyed by the ``"frag.port"`` text, are still read;
* ``outputs.pkl``: one pickle per finished step, ``(step, outputs)``, in step order (a frame cut short by a kill
  is dropped on resume).

Pickle, as ``torch.save`` uses: load only checkpoints you wrote.
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
from pathlib import Path
from typing import Any

from hqflow.ir.graph import Graph, GraphError

from ..common.files import atomic_write
from .ports import PortRef
from .scheduler_config import SchedulerConfig
from .window import Values

VERSION = 4


class CheckpointError(GraphError):
    """A run directory that cannot be resumed (another graph, another seed, damaged files)."""


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


def graph_digest(graph: Graph) -> str:
    """A graph's fingerprint: its JSON document without the QPY copies of its circuits (QPY names
    parameters by random UUIDs; the plain-data gates beside them say the same)."""

    def plain(node):
        if isinstance(node, dict):
            return {k: plain(v) for k, v in node.items() if k != "qpy"}
        if isinstance(node, list):
            return [plain(v) for v in node]
        return node

    return _digest(json.dumps(plain(json.loads(graph.to_json(indent=None))), sort_keys=True).encode())


def item_digest(item: Any) -> str | None:
    """A stream item's fingerprint (None when it cannot be pickled), to check a resumed stream."""
    try:
        return _digest(pickle.dumps(item, protocol=4))
    except Exception:  # noqa: BLE001 - a generator or a lock in an item: no check
        return None


class Record:
    """A workload's own record in its checkpoints (``run(..., record=)``; the RL trainer's returns, metrics, counters):
    each step that joins the finished prefix is ``add``-ed in step order (False: the run ended before it, and so do
    the prefix and the checkpoint), and a checkpoint keeps ``saved()``. The workload reads its checkpoint with
    :func:`load` and gives it back as ``resumed``; its run keeps it in ``file``, and no outputs (the record holds
    what it needs of them); it checks that a resume is the same run, so its graph may change (another distribution)."""

    file, resumed = "checkpoint.pt", None

    def add(self, step: int, outputs: dict) -> bool:
        return True

    def saved(self) -> Any:
        return None


def load(path: Path) -> dict:
    """A checkpoint file of any version, its ``state`` by port; a one-line ``CheckpointError`` if it is not one."""
    try:
        saved = pickle.loads(path.read_bytes())
    except OSError as exc:
        raise CheckpointError(f"cannot read {path}: {exc.strerror}") from None
    except Exception:  # noqa: BLE001 - truncated or not a pickle
        raise CheckpointError(f"{path} is damaged: not a checkpoint") from None
    if not isinstance(saved, dict) or saved.get("version") not in range(1, VERSION + 1) \
            or not isinstance(saved.get("steps"), int):
        raise CheckpointError(f"{path} is damaged: not a checkpoint of this hqflow")
    try:  # loop values by port: [port, value] pairs since version 2, version 1's keyed by "frag.port" text
        if saved["state"] is not None:
            saved["state"] = {PortRef.parse(k): v for k, v in saved["state"].items()} if saved["version"] == 1 \
                else {PortRef.from_dict(ref): value for ref, value in saved["state"]}
    except (AttributeError, TypeError, ValueError):
        raise CheckpointError(f"{path} is damaged: its loop values are not by port") from None
    return {"record": None, **saved}


class Checkpointer:
    """A run's checkpoint files while it goes on: its stream items' fingerprints, the steps that join the
    finished prefix recorded in order (and ``add``-ed to the workload's ``record``), and the loop values saved
    after every ``checkpoint_every``-th of them and when the run stops. Without a ``run_dir`` (``path`` None) it
    writes nothing."""

    def __init__(self, config: SchedulerConfig, graph: Graph, record: Record | None = None):
        self.digests: dict[int, str | None] = {}  # step -> its stream item's fingerprint
        self.prefix, self.record, self.ended = 0, record, False  # prefix: steps before the first unfinished one
        self.saved: dict = {"steps": 0, "state": None, "item": None, "outputs": [], "seed": config.seed,
                            "run_id": None}
        self.path, self._out = None if config.run_dir is None else Path(config.run_dir), None
        if self.path is None:
            return
        self.every, self.graph_digest = config.checkpoint_every, None if record else graph_digest(graph)
        self.state_file = self.path / (record.file if record else "state.pkl")
        self.outputs_file = self.path / "outputs.pkl"
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            exists = self.state_file.exists()
        except OSError as exc:
            raise CheckpointError(f"cannot use run directory {self.path}: {exc.strerror}") from None
        if config.resume and exists:
            self._load(config.seed)
        elif exists:
            raise CheckpointError(f"{self.path} holds a run's checkpoint: pass resume=True to continue it, "
                                  "or give an empty directory")
        self.saved_steps = self.saved["steps"]
        self._out = None if record else open(self.outputs_file, "ab")  # (a record holds what it needs of the outputs)

    @property
    def run_id(self) -> str | None:
        """The checkpointed run's identity (None for a fresh run)."""
        return self.saved["run_id"]

    def _load(self, seed: int | None) -> None:
        saved = self.record.resumed if self.record is not None and self.record.resumed else load(self.state_file)
        if saved["graph"] != self.graph_digest:
            raise CheckpointError(f"{self.path} is the checkpoint of another graph; resume it with the graph it ran")
        if saved["seed"] != seed:
            raise CheckpointError(f"{self.path} ran with seed={saved['seed']!r}; resume it with that seed, not {seed!r}")
        saved["outputs"] = [] if self.record else self._read_outputs(saved["steps"])
        self.saved = saved

    def _read_outputs(self, steps: int) -> list:
        """The outputs of steps ``0..steps-1``; the file is cut back to them (a kill may leave more, or half a frame)."""
        outputs, end = [], 0
        try:
            with open(self.outputs_file, "rb") as fh:
                while len(outputs) < steps:
                    step, out = pickle.load(fh)
                    if step != len(outputs):
                        raise ValueError("out of order")
                    outputs.append(out)
                    end = fh.tell()
        except Exception:  # noqa: BLE001 - no file, or a torn frame: fewer outputs than the state says
            pass
        if len(outputs) < steps:
            raise CheckpointError(f"{self.outputs_file} is damaged: it holds {len(outputs)} steps' outputs, "
                                  f"the checkpoint {steps}")
        if self.outputs_file.exists():
            os.truncate(self.outputs_file, end)
        return outputs

    def _save(self, steps: int, state: dict[PortRef, Any], item: str | None, run_id: str | None) -> None:
        """The loop-carried values after ``steps`` finished steps (their outputs recorded first), the record's now."""
        if self._out is not None:
            os.fsync(self._out.fileno())
        data = {"version": VERSION, "graph": self.graph_digest, "seed": self.saved["seed"], "run_id": run_id,
                "steps": steps, "state": [[ref.to_dict(), value] for ref, value in state.items()], "item": item,
                "record": None if self.record is None else self.record.saved()}
        blob = pickle.dumps(data, protocol=4)
        atomic_write(self.state_file, lambda p: Path(p).write_bytes(blob))
        self.saved_steps = steps

    def restore(self, items, values: Values, outputs: dict) -> int:
        """Continue a checkpointed run: skip its steps in ``items``, restore its loop ``values`` and its
        ``outputs``; returns how many steps it had finished."""
        saved, steps = self.saved, self.saved["steps"]
        if not steps:
            return 0
        self.prefix = steps
        for j in range(steps):
            item = next(items, None)
            if item is None:
                raise CheckpointError(f"the stream ended after {j} items; the checkpoint in {self.path} is "
                                      f"past {steps} steps: give the run's own stream")
        if saved["item"] is not None and item_digest(item) not in (None, saved["item"]):
            raise CheckpointError(f"the stream differs from the checkpointed run's: item {steps - 1} is not the "
                                  "one it ran; give the run's own stream")
        values.restore(steps, saved["state"])
        outputs.update(enumerate(saved["outputs"]))
        return steps

    def admit(self, step: int, item: Any) -> None:
        """Step ``step`` begins with ``item``: its fingerprint goes with the checkpoint that ends after it."""
        if self.path is not None:
            self.digests[step] = item_digest(item)

    def finished(self, outputs: dict[int, dict], values: Values, run_id: str) -> None:
        """Record the steps that joined the finished prefix; save the loop values when a save is due."""
        ended = False
        while self.prefix in outputs and not self.ended and (self.path or self.record) is not None:
            if self.record is not None and not self.record.add(self.prefix, outputs[self.prefix]):
                self.ended = ended = True  # the run ended before this step: saved now, while its versions are kept
                break
            if self._out is not None:  # appended in step order
                pickle.dump((self.prefix, outputs[self.prefix]), self._out, protocol=4)
                self._out.flush()
            self.prefix += 1
        if self.path is not None and (ended or self.prefix // self.every > self.saved_steps // self.every):
            self.stop(values, run_id)
        for k in [k for k in self.digests if k < self.prefix - 1]:
            del self.digests[k]

    def stop(self, values: Values, run_id: str | None) -> None:
        """The run ends here (done, failed or interrupted): save the finished prefix."""
        if self.path is not None and self.prefix != self.saved_steps:  # never None: Values.forget keeps every
            # version from the oldest unfinished step on (a record that ends the run saves at once)
            self._save(self.prefix, values.at(self.prefix), self.digests.get(self.prefix - 1), run_id)

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
