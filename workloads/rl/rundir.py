"""A training run's directory, written atomically; ``RunDir(None)``: a run without one (it writes nothing).

``config.json`` (algorithm, config, distribution, pools without secrets, run id: the latest settings, which a
resume takes), ``metrics.jsonl`` (a row per update; a resume rewrites it from the checkpoint, which holds every
row), ``checkpoint.pt`` (the engine's, ``hqflow.engine.checkpoint``, with the run's record), ``ledger.jsonl`` (what
every process of the run paid, written before each job), ``resources.jsonl`` (a line per part of the run,
``"start"`` or ``"resume"``, and per pool change, ``"change"``), ``tensorboard/``, ``spans.json`` and ``trace.json``
(open it in Perfetto), and ``learning_curve.png``.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from hqflow.backends import SECRETS, backend_spec
from hqflow.common.files import atomic_text, atomic_write
from hqflow.engine import checkpoint
from hqflow.engine.ports import PortRef
from hqflow.engine.window import Versions
from hqflow.trace import save_spans
from hqflow.trace.export import write_chrome_trace


RunDirError = checkpoint.CheckpointError  # a run directory that cannot be resumed: damaged, or not a run (one line)


def json_pools(backends) -> dict | None:
    """Pools given as names and options, for config.json (so a resume uses them again), without secrets;
    None for pools of backend objects."""
    if not backends:
        return None
    try:
        out = {name: [[spec, {k: v for k, v in options.items() if k not in SECRETS}] for spec, options in
                      map(backend_spec, specs if isinstance(specs, list) else [specs])] for name, specs in backends.items()}
        json.dumps(out)
    except (TypeError, ValueError):  # backend objects, or options JSON cannot hold: not storable
        return None
    return out


class RunDir:
    def __init__(self, path, tensorboard: bool = True):
        self.path = None if path is None else Path(path)
        self.tensorboard, self.board, self.meta = tensorboard, None, {}

    # --- reading ---------------------------------------------------------------------------------

    def read_meta(self) -> dict:
        """``config.json``: a ``RunDirError`` naming the file for a directory that is not a run, or damaged."""
        path = self.path / "config.json"
        try:
            is_run = path.is_file()
        except OSError as exc:  # a name too long, say: is_file() raises for all but a missing file
            raise RunDirError(f"cannot read {self.path}: {exc.strerror}") from None
        if not is_run:
            raise RunDirError(f"{self.path}: no such run directory" if not self.path.exists() else
                              f"{self.path} is not a run directory (no config.json)")
        meta = _read(path, lambda p: json.loads(p.read_bytes().decode("utf-8")), ": not a JSON document")
        if not isinstance(meta, dict) or not isinstance(meta.get("config"), dict) \
                or not isinstance(meta.get("distribution_options", {}), dict):
            raise RunDirError(f"{path} is damaged: it must be an object with 'algo', 'config' and 'distribution'")
        self.meta = meta
        return meta

    def read_checkpoint(self, meta: dict, seed: int) -> dict | None:
        """``checkpoint.pt`` (None if there is none yet): its record (``update``, ``returns``, ...), its newest loop
        values by name as ``"state"`` and the engine's checkpoint as ``"saved"`` (one of an earlier hqflow's format
        too: ``_legacy``). Damaged: a ``RunDirError`` naming it."""
        path = self.path / "checkpoint.pt"
        if not path.exists():
            return None
        try:
            saved = checkpoint.load(path)
        except RunDirError:
            saved = _legacy(path, meta, seed)
        if not (isinstance(saved["state"], dict) and isinstance(saved["record"], dict)
                and isinstance(saved["record"].get("update"), int)):
            raise RunDirError(f"{path} is damaged: it holds no training state")
        newest = {str(ref): v.values[max(v.values)] if isinstance(v, Versions) else v
                  for ref, v in saved["state"].items()}
        return {**saved["record"], "state": newest, "saved": saved}

    def rows(self, last_update: int) -> list[dict]:
        """The rows of ``metrics.jsonl`` up to ``last_update``, for a checkpoint that does not hold them (written
        before hqflow kept them there). A half-written last line (what a kill leaves) is dropped; anything else
        wrong, or fewer rows than the checkpoint's updates, is a ``RunDirError``."""
        path = self.path / "metrics.jsonl"
        lines = _read(path, lambda p: p.read_bytes().decode("utf-8"), ": not text").splitlines() if path.exists() else []
        rows = []
        for k, line in enumerate(lines):
            try:
                row = json.loads(line)
                if not isinstance(row, dict) or not isinstance(row.get("update"), int):
                    raise ValueError
            except ValueError:
                if k == len(lines) - 1:
                    break  # half-written by a kill
                raise RunDirError(f"{path} is damaged at line {k + 1}") from None
            if row["update"] <= last_update:
                rows.append(row)
        if len(rows) != last_update + 1:
            raise RunDirError(f"{path} has {len(rows)} rows where the checkpoint has {last_update + 1} updates: "
                              "restore it, or start a new run")
        return rows

    # --- writing ---------------------------------------------------------------------------------

    def start(self, meta: dict, part: dict, rows: list[dict], update: int, fresh: bool) -> None:
        """A part of the run starts at ``update``: config.json (a fresh run's ``meta``, or the run's read one with
        this ``part``'s distribution and pools where they changed), a resources.jsonl line, metrics.jsonl rewritten with
        ``rows``, and the TensorBoard writer (a resume drops the events past its checkpoint, as metrics.jsonl)."""
        if self.path is None:
            return
        self.path.mkdir(parents=True, exist_ok=True)
        if fresh:  # a new run over an earlier one's files: not its checkpoint
            (self.path / "checkpoint.pt").unlink(missing_ok=True)
        if fresh or json.loads(json.dumps(part)) != {k: self.meta.get(k) for k in part}:
            self.meta = meta if fresh else {**self.meta, **part}
            atomic_text(self.path / "config.json", json.dumps(self.meta, indent=2))
        self._line("resources.jsonl", {"event": "start" if fresh else "resume", "update": update, **part})
        atomic_text(self.path / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
        if self.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            purge = None if fresh or not rows else rows[-1]["env_steps"] + 1
            self.board = SummaryWriter(str(self.path / "tensorboard"), purge_step=purge)
            if fresh:  # as CleanRL: the settings as a table
                self.board.add_text("hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(
                    f"|{k}|{v}|" for k, v in meta["config"].items()))

    def log(self, row: dict, scalars: list[tuple[str, float]], step: int) -> None:
        """An update's row of metrics.jsonl and its TensorBoard scalars at ``step``."""
        if self.board is not None:
            for tag, value in scalars:
                self.board.add_scalar(tag, value, step)
        if self.path is not None:
            self._line("metrics.jsonl", row)

    def ledger(self, resume: bool, start: tuple | None) -> str | None:
        """``ledger.jsonl``, the run's spend written ahead of every job (``hqflow.jobs.ledger``): a resumed run goes on
        with it (the jobs a killed process paid for count); a new run's, or one from before hqflow kept it, starts
        from ``start`` (spend, shots, currency): what the run paid before (a calibration), or the checkpoint's."""
        if self.path is None:
            return None
        path = self.path / "ledger.jsonl"
        if not resume or not path.exists():
            spend, shots, currency = start or (0.0, 0, None)
            atomic_text(path, json.dumps({"spend": spend, "shots": shots, "currency": currency}) + "\n"
                        if spend or shots else "")
        return str(path)

    def initial(self, params: dict | None) -> dict | None:
        """``init.pt``: the parameters a run started from (``--init-from``), kept with ``params``, else read back
        (a resume before the first checkpoint starts there again); None where the run started from its seed."""
        path = None if self.path is None else self.path / "init.pt"
        if params is not None and path is not None:
            atomic_write(path, lambda p: torch.save(params, p))
        elif params is None and path is not None and path.exists():
            params = _read(path, lambda p: torch.load(p, weights_only=True), " ({kind}): truncated, or not parameters")
        return params

    def changed(self, change: dict, update: int) -> None:
        """A pool change while the run goes on: config.json's pools (a later resume takes them), and a line of
        resources.jsonl."""
        if self.path is None:
            return
        pools = dict(self.meta.get("backends") or {}, **{change["pool"]: change["backends"]})
        stored = json_pools({name: [tuple(m) for m in specs] for name, specs in pools.items()})  # no secrets
        try:
            self.meta["backends"] = stored
            atomic_text(self.path / "config.json", json.dumps(self.meta, indent=2))
            self._line("resources.jsonl", {"event": "change", "update": update, **change,
                                           "backends": stored[change["pool"]]})
        except OSError as exc:
            print(f"hqflow: resources: cannot record the change in {self.path}: {exc.strerror}", file=sys.stderr)

    def finish(self, spans, returns: list, title: str) -> None:
        """spans.json, trace.json and learning_curve.png."""
        if self.path is not None:
            save_spans(str(self.path / "spans.json"), spans)
            write_chrome_trace(str(self.path / "trace.json"), spans)
            plot_learning_curve(returns, self.path / "learning_curve.png", title)

    def close(self) -> None:
        if self.board is not None:
            self.board.close()

    def _line(self, name: str, entry: dict) -> None:
        with open(self.path / name, "a") as fh:
            fh.write(json.dumps(entry) + "\n")


def _read(path: Path, parse, damaged: str):
    """``parse(path)``, or a one-line ``RunDirError``: the file cannot be read, or it is damaged (``damaged`` says
    how; ``{kind}`` in it: the error's type)."""
    try:
        return parse(path)
    except OSError as exc:
        raise RunDirError(f"cannot read {path}: {exc.strerror}") from None
    except Exception as exc:  # noqa: BLE001 - JSON, UTF-8 and torch.load raise many kinds (EOFError, UnpicklingError, ...)
        raise RunDirError(f"{path} is damaged{damaged.format(kind=type(exc).__name__)}") from None


def _legacy(path: Path, meta: dict, seed: int) -> dict:
    """A checkpoint.pt of hqflow before it kept the engine's format (``torch.save`` of the trainer's record, its
    ``"state"`` by name and the older parameters, ``"stale"``), as the engine's."""
    data = _read(path, lambda p: torch.load(p, weights_only=False), " ({kind}): truncated, or not a checkpoint")
    if not (isinstance(data, dict) and isinstance(data.get("state"), dict) and isinstance(data.get("update"), int)):
        return {"state": None, "record": None}  # (named damaged by read_checkpoint)
    state, steps = {PortRef.parse(k): v for k, v in data.pop("state").items()}, data["update"] + 1
    extra = state.get(PortRef("learn", "extra"))
    if isinstance(extra, dict) and "episodes" not in extra:  # from before the learner counted them
        extra["episodes"] = len(data.get("returns", ()))
    params = PortRef("learn", "params")  # with the older versions that rollouts at staleness > 0 take
    state[params] = Versions({**data.pop("stale", {}), steps: state[params]})
    return {"graph": None, "seed": seed, "run_id": meta.get("run_id"), "steps": steps, "state": state, "item": None,
            "record": data}


def plot_learning_curve(returns, path, title: str, window: int = 10) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    r = np.asarray(returns, dtype=float)
    ax.plot(np.arange(1, len(r) + 1), r, lw=0.6, alpha=0.4, label="episode return")
    if len(r) >= window:
        ax.plot(np.arange(window, len(r) + 1), np.convolve(r, np.ones(window) / window, "valid"), lw=1.5,
                label=f"mean of {window}")
    ax.set_xlabel("episode")
    ax.set_ylabel("return")
    ax.set_title(title)
    ax.legend(loc="upper left")
    fig.tight_layout()
    atomic_write(Path(path), lambda p: fig.savefig(p, format="png", dpi=100))
    plt.close(fig)
