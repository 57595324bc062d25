"""Run an RL algorithm as a dataflow graph under a distribution policy, with a run directory.

The algorithm is written once (``reinforce``, ``dqn``, ``ppo``), as a module with:

* ``Config`` (a frozen dataclass; ``seed``, ``env`` and ``max_episodes`` fields);
* ``make_policy(cfg)``, ``make_optimizer(policy, cfg)``, ``make_envs(cfg)``, ``init_extra(cfg, policy)``;
* ``act(policy, envs, cfg, step) -> batch`` (the actor: ``batch.episode_returns``,
  ``batch.n_steps`` and ``batch.circuit_evals``); deterministic for ``(cfg.seed, step)``;
  an actor that may keep state between updates (environments that run on, with
  ``autoreset``; running statistics of the observations) also has ``init_carry(cfg)``
  (None when this config keeps none) and ``act(..., carry) -> (batch, carry)``;
* optionally ``resolve(cfg, in_process, devices) -> cfg``: settings that depend on the
  backend (``groups``, ``num_envs``, ``autoreset``), fixed once before the run so the
  run directory records them;
* ``learn(policy, optimizer, batch, cfg, extra, step) -> (metrics, extra)`` (the learner;
  ``metrics["circuit_evals"]``, if given, counts the circuit rows it ran);
* ``within_budget(batch, cfg, episodes) -> batch``: the batch cut to the episodes the budget leaves
  (the learner counts the run's episodes, so ``max_episodes`` is exact).

Each iteration (one stream item, ``{"step": k}``) is two fragments::

    rollout (cpu) --batch--> learn (gpu: the learner's own slot)
    learn.params ~> rollout.params (max_staleness = the policy's staleness)
    learn.params, learn.opt, learn.extra ~> learn.* (strictly sequential)
    rollout.carry ~> rollout.carry (only with an actor that carries state: it orders the rollouts)

On a job backend (one that does not differentiate in process) both fragments declare
it in ``job_backends``, so every policy forward pass and gradient job goes through the
scheduler's pool for that name: latency-aware dispatch over several QPUs, retries with
failover, timeouts and spans. ``train(..., backends={"qpu": [...]})`` makes a pool.

Fragments are pure functions of their inputs: the parameters and the optimizer's
state travel on loop-carried edges, so a checkpoint is just their latest values
and a resumed run continues bit for bit. Policies, optimizers and environments are
scratch objects cached per thread (and per process on Ray).

``train(algo, cfg, distribution, run_dir, resume)`` writes to ``run_dir``:
``config.json``, ``metrics.jsonl`` (one line per update), ``checkpoint.pt`` (every
``checkpoint_every`` updates and at the end, written atomically), ``spans.json`` and
``trace.json`` (the scheduler's trace; open it in Perfetto), ``learning_curve.png``, and
``resources.jsonl``: one line per part of the run (``"event": "start"`` or ``"resume"``, with the
distribution and pools it ran with) and per pool change while it ran (``"event": "change"``,
``hqflow.resources``), each with ``update``, the updates complete by then.

A resumed run may run under another distribution and other pools (Tenplex-style): the algorithm's
config stays the run's own, so at staleness 0 with exact backends of the same kind it continues to
the result the run would have reached (``multi-learner``: up to floating-point summation order).
``config.json`` holds the settings the run runs with now, so a later resume takes the latest.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import importlib
import json
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from hqflow.ir import Graph

import hqflow as hq
from hqflow.collective import replica
from hqflow.distribution import get_distribution
from hqflow.executors import ExecutorKind
from hqflow.files import atomic_text, atomic_write
from hqflow.scheduler import Scheduler
from hqflow.trace import save_spans
from hqflow.torch import ReducedGradients
from hqflow.trace_export import write_chrome_trace
from hqflow.workloads.rl.algorithm import Algorithm, load_params
from hqflow.workloads.rl.algorithm import params as _params
from hqflow.workloads.rl.envs import EnvImportError
from hqflow.workloads.rl.policies import shard_rows

ALGORITHMS = {"reinforce": "hqflow.workloads.rl.reinforce", "dqn": "hqflow.workloads.rl.dqn",
              "ppo": "hqflow.workloads.rl.ppo"}
_LOCAL = threading.local()


def algorithm(name: str) -> Algorithm:
    """The algorithm registered as ``name`` (its declared interface, ``algorithm.Algorithm``)."""
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; known: {', '.join(ALGORITHMS)}")
    return importlib.import_module(ALGORITHMS[name]).ALGORITHM


def _config(algo: str, config: dict):
    return algorithm(algo).Config(**config)


def _scratch(algo: str, config: dict, role: str):
    """This thread's (policy, optimizer, envs) for a run: scratch state, overwritten every call."""
    cache = getattr(_LOCAL, "cache", None)
    if cache is None:
        cache = _LOCAL.cache = {}
    key = (algo, json.dumps(config, sort_keys=True), role)
    if key not in cache:
        mod, cfg = algorithm(algo), _config(algo, config)
        policy = mod.make_policy(cfg)
        cache[key] = (policy, mod.make_optimizer(policy, cfg) if role == "learner" else None,
                      mod.make_envs(cfg) if role == "actor" else None)
    return cache[key]


# --- the two fragments -------------------------------------------------------------------

def rollout(params, step, algo, config):
    """The actor: run the environments with ``params``."""
    policy, _, envs = _scratch(algo, config, "actor")
    load_params(policy, params)
    batch, _ = algorithm(algo).act(policy, envs, _config(algo, config), int(step), None)
    return {"batch": batch}


def _carries(mod, cfg) -> bool:
    """Whether the actor keeps state between updates with this config (a ``rollout.carry`` loop edge).
    Without one, rollouts depend on nothing but the parameters, so several can run at once."""
    return mod.init_carry(cfg) is not None


def rollout_carry(params, carry, step, algo, config):
    """The actor of an algorithm that carries state between updates (``init_carry``)."""
    policy, _, envs = _scratch(algo, config, "actor")
    load_params(policy, params)
    batch, carry = algorithm(algo).act(policy, envs, _config(algo, config), int(step), carry["value"])
    return {"batch": batch, "carry": {"value": carry}}


def learn(batch, params, opt, extra, step, algo, config):
    """The learner: one update from ``(params, opt, extra)`` and the actor's batch.

    As one of several replicas (the ``multi-learner`` policy, ``hqflow.collective``), it
    differentiates its share of every batched circuit call and the gradients are reduced at the end
    of each backward pass: every replica applies the whole batch's update, as one learner would.
    """
    mod, cfg = algorithm(algo), _config(algo, config)
    left = cfg.max_episodes - extra["episodes"]
    if left < 1:  # admitted before the run stopped at its episode budget: nothing of it is part of the run
        return {"params": params, "opt": opt, "extra": extra, "report": {
            "returns": [], "lengths": [], "env_steps": 0, "env_steps_taken": 0, "circuit_evals": 0, "loss": float("nan"),
            "losses": {}}}
    batch = mod.within_budget(batch, cfg, left)  # the budget's last rollout stops on its last episode
    policy, optimizer, _ = _scratch(algo, config, "learner")
    load_params(policy, params)
    optimizer.load_state_dict(copy.deepcopy(opt))
    rep = replica()
    sharded = shard_rows(policy, *((rep.rank, rep.size) if rep is not None else (None,)))
    try:
        with ReducedGradients(policy, sharded) if rep is not None else contextlib.nullcontext():
            metrics, value = mod.learn(policy, optimizer, batch, cfg, extra["value"], int(step))
    finally:
        shard_rows(policy, None)
    report = {"returns": [float(r) for r in batch.episode_returns],
              "lengths": [int(n) for n in batch.episode_lengths], "env_steps": int(batch.n_steps),
              "env_steps_taken": int(batch.n_steps if batch.steps_taken < 0 else batch.steps_taken),
              "circuit_evals": int(batch.circuit_evals) + int(metrics.get("circuit_evals", 0)),  # + the learner's
              "loss": float(metrics["loss"]), "losses": {k: float(v) for k, v in metrics["losses"].items()}}
    return {"params": _params(policy), "opt": copy.deepcopy(optimizer.state_dict()),
            "extra": {"value": value, "episodes": extra["episodes"] + len(batch.episode_returns)}, "report": report}


def build_graph(algo: str, cfg, staleness: int = 0, job_backends: tuple[str, ...] = ()) -> Graph:
    """The two fragments; ``job_backends``: the backend names their jobs go to through the scheduler."""
    config = dataclasses.asdict(cfg)
    carries = _carries(algorithm(algo), cfg)
    pipe = hq.Pipeline(f"{algo}_{cfg.env}")
    pipe.input("step", "scalar")
    outputs = {"batch": "any", "carry": "any"} if carries else {"batch": "any"}
    pipe.preprocess(rollout_carry if carries else rollout, name="rollout", outputs=outputs,
                    params={"algo": algo, "config": config}, job_backends=job_backends)
    pipe.learn(learn, outputs={"params": "any", "opt": "any", "extra": "any", "report": "any"},
               resource="gpu", params={"algo": algo, "config": config}, job_backends=job_backends)
    pipe.loop("learn.params", "rollout.params", max_staleness=staleness)
    pipe.loop("learn.params", "learn.params")
    pipe.loop("learn.opt", "learn.opt")
    pipe.loop("learn.extra", "learn.extra")
    if carries:
        pipe.loop("rollout.carry", "rollout.carry")
        pipe.output("rollout.carry")
    for port in ("params", "opt", "extra", "report"):
        pipe.output(f"learn.{port}")
    return pipe.build()


def initial_state(algo: str, cfg) -> dict:
    mod = algorithm(algo)
    policy = mod.make_policy(cfg)
    optimizer = mod.make_optimizer(policy, cfg)
    state = {"learn.params": _params(policy), "learn.opt": copy.deepcopy(optimizer.state_dict()),
             "learn.extra": {"value": mod.init_extra(cfg, policy), "episodes": 0}}  # boxed: None is a value here;
    # "episodes": those the updates so far completed (the learner's, in order: the budget's count)
    if _carries(mod, cfg):
        state["rollout.carry"] = {"value": mod.init_carry(cfg)}
    return state


def _pinned_encoding(cfg, fresh: bool):
    """``cfg`` with an ``obs_encoding`` of "auto" made the one it stands for now (box, running, binary,
    onehot; a short name's own stays "auto"), so the run directory records it. A run from before
    running statistics recorded "auto" where a Box then meant "box" (``load_policy`` reads it so too)."""
    from hqflow.workloads.rl.envs import get_spec, legacy_encoding

    if getattr(cfg, "obs_encoding", None) != "auto":
        return cfg
    name = get_spec(cfg.env).obs_encoding if fresh else legacy_encoding(cfg.env, "auto")
    return cfg if name == "auto" else dataclasses.replace(cfg, obs_encoding=name)


def circuits_per_env_step(algo: str, cfg) -> tuple[float, int]:
    """``(circuits, parameters)``: what an environment step costs in circuits where the policy's circuit runs
    as jobs (each one service job per measurement group on a cloud target), from the policy's template and
    the algorithm (``Algorithm.circuits_per_step``), and the circuit's parameters (inputs and weights)."""
    from hqflow.gradients import param_shift
    from hqflow.workloads.rl.policies import _PQC

    mod = algorithm(algo)
    policy = mod.make_policy(dataclasses.replace(cfg, backend="reference"))  # the template is the backend's own
    template = next(m.template for m in policy.modules() if isinstance(m, _PQC))
    batch, _ = param_shift(template, np.zeros((1, template.n_inputs)), np.zeros(template.n_weights), wrt="both")
    return mod.circuits_per_step(cfg, batch.size), template.n_inputs + template.n_weights


def default_distribution(in_process: bool):
    """``sync`` on a backend that runs in process (nothing to hide: threads would cost more than they
    overlap); on a job backend ``pipelined`` with staleness 1 and one actor, so the learner's work and
    gradient job overlap with the next rollout and the QPU does not wait for the learner."""
    return get_distribution("sync") if in_process else get_distribution("pipelined", staleness=1, actors=1)


def backend_facts(name: str, backends: Mapping | None = None) -> tuple[bool, int]:
    """``(in_process, devices)`` of the backend (or pool) ``name``: whether it differentiates in
    process (then the policy calls it directly, with no jobs) and how many device slots it has."""
    from hqflow.backends import is_backend
    from hqflow.executors import make_backend
    from hqflow.torch import differentiates

    specs = (backends or {}).get(name, name)
    specs = specs if isinstance(specs, list) else [specs]
    made = [make_backend(spec) for spec in specs]
    in_process = len(made) == 1 and differentiates(made[0])
    devices = sum(int(b.max_in_flight or 1) for b in made)
    for spec, backend in zip(specs, made):
        if not is_backend(spec):  # made here only to ask: closed (a caller's instance is left as it is)
            backend.close()
    return in_process, devices


# --- the run directory --------------------------------------------------------------------

def _metrics_rows(run_dir: Path, last_update: int) -> list[dict]:
    """The rows of ``metrics.jsonl`` up to ``last_update``, for a checkpoint that does not hold them
    (written before hqflow kept them there). A half-written last line (what a kill leaves) is dropped;
    anything else wrong, or fewer rows than the checkpoint's updates, is a ``ValueError``."""
    path = run_dir / "metrics.jsonl"
    try:
        lines = path.read_bytes().decode("utf-8").splitlines()
    except FileNotFoundError:
        lines = []
    except OSError as exc:
        raise RunDirError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise RunDirError(f"{path} is damaged: not text") from None
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


# options never written to a run directory (they come back from the environment on --resume)
SECRET_OPTIONS = ("key", "api_key", "credential", "connection_string", "password", "token", "secret")


def _json_pools(backends) -> dict | None:
    """Pools given as names and options, for config.json (so --resume uses them again), without
    secrets (``SECRET_OPTIONS``); None otherwise."""
    if not backends:
        return None
    out = {}
    for name, specs in backends.items():
        specs = specs if isinstance(specs, list) else [specs]
        if not all(isinstance(s, str) or (isinstance(s, tuple) and len(s) == 2) for s in specs):
            return None  # backend objects: not storable
        out[name] = [[s, {}] if isinstance(s, str) else
                     [s[0], {k: v for k, v in s[1].items() if k not in SECRET_OPTIONS}] for s in specs]
    try:
        json.dumps(out)
    except TypeError:
        return None
    return out


def _log_resources(run_dir: Path, entry: dict) -> None:
    """One line of ``resources.jsonl``: the resources a part of the run started with, or a change."""
    with open(run_dir / "resources.jsonl", "a") as fh:
        fh.write(json.dumps(entry) + "\n")


class RunDirError(ValueError):
    """A run directory that cannot be resumed: damaged, or not a run; the message names the file."""


def load_run(run_dir) -> tuple[dict, dict | None]:
    """``(config.json, last checkpoint or None)`` of a run directory. A directory that is not a run, or a
    damaged ``config.json`` or ``checkpoint.pt``, is a ``ValueError`` with one line naming the file."""
    run_dir = Path(run_dir)
    path = run_dir / "config.json"
    try:
        is_run = path.is_file()
    except OSError as exc:  # a name too long, say: is_file() raises for all but a missing file
        raise RunDirError(f"cannot read {run_dir}: {exc.strerror}") from None
    if not is_run:
        missing = not run_dir.exists()
        raise RunDirError(f"{run_dir}: no such run directory" if missing else
                          f"{run_dir} is not a run directory (no config.json)")
    try:
        meta = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise RunDirError(f"cannot read {path}: {exc.strerror}") from None
    except (UnicodeDecodeError, RecursionError, ValueError):
        raise RunDirError(f"{path} is damaged: not a JSON document") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("config"), dict) \
            or not isinstance(meta.get("distribution_options", {}), dict):
        raise RunDirError(f"{path} is damaged: it must be an object with 'algo', 'config' and 'distribution'")
    try:
        mod = algorithm(meta.get("algo"))
        mod.Config(**meta["config"])
        if "distribution" in meta:  # (hqflow eval needs none)
            get_distribution(meta["distribution"], **meta.get("distribution_options", {}))
    except EnvImportError as exc:  # the config is sound: its environment's module is not importable here
        raise RunDirError(f"{run_dir}: {exc}") from None
    except (ValueError, TypeError, ImportError) as exc:
        raise RunDirError(f"{path} is damaged: {' '.join(str(exc).split())}") from None
    ckpt = run_dir / "checkpoint.pt"
    if not ckpt.exists():
        return meta, None
    try:
        data = torch.load(ckpt, weights_only=False)
    except OSError as exc:
        raise RunDirError(f"cannot read {ckpt}: {exc.strerror}") from None
    except Exception as exc:  # noqa: BLE001 - torch.load raises EOFError, UnpicklingError, RuntimeError, ...
        raise RunDirError(f"{ckpt} is damaged ({type(exc).__name__}): truncated, or not a checkpoint") from None
    if not isinstance(data, dict) or not isinstance(data.get("state"), dict) or not isinstance(data.get("update"), int):
        raise RunDirError(f"{ckpt} is damaged: it holds no training state")
    extra = data["state"].get("learn.extra")
    if isinstance(extra, dict) and "episodes" not in extra:  # a checkpoint from before the learner counted them
        extra["episodes"] = len(data.get("returns", ()))
    return meta, data


def check_resume(run_dir, algo: str, cfg, ckpt: dict) -> None:
    """What ``train(resume=True)`` reads besides ``load_run``: the checkpoint's parameters against the
    config, and ``metrics.jsonl`` where the checkpoint does not hold the rows (``RunDirError``)."""
    run_dir = Path(run_dir)
    _check_state(ckpt["state"], initial_state(algo, cfg), run_dir / "checkpoint.pt")
    if "metrics" not in ckpt:
        _metrics_rows(run_dir, ckpt["update"])


def _check_state(saved: dict, fresh: dict, path: Path) -> None:
    """A checkpoint's state has the structure and tensor shapes this run's config makes."""
    def walk(a, b, where):
        if isinstance(b, dict):
            if not isinstance(a, dict) or set(a) != set(b):
                raise RunDirError(f"{path} does not match its run's config: {where or 'the state'} differs")
            for k in b:
                walk(a[k], b[k], f"{where}.{k}" if where else str(k))
        elif isinstance(b, torch.Tensor) and (not isinstance(a, torch.Tensor) or a.shape != b.shape):
            shape = list(a.shape) if isinstance(a, torch.Tensor) else type(a).__name__
            raise RunDirError(f"{path} does not match its run's config: {where} is {shape}, expected {list(b.shape)}")

    walk(saved.get("learn.params"), fresh.get("learn.params"), "learn.params")  # what a resumed run computes with


def train(algo: str = "reinforce", cfg=None, distribution="auto", run_dir=None, resume: bool = False,
          checkpoint_every: int = 5, progress=None, backends: Mapping | None = None, tensorboard: bool = True,
          resources=None, **scheduler) -> dict:
    """Train, writing the run directory; ``resume`` continues ``run_dir`` from its checkpoint.

    ``distribution``: a policy or its name; ``"auto"`` (``default_distribution``): ``sync`` on an
    in-process backend, ``pipelined`` (staleness 1) on a job backend.
    ``backends`` maps a backend name (``cfg.backend``) to a pool, as ``hq.run`` takes it;
    ``scheduler`` are ``SchedulerConfig`` fields (``max_retries``, ``job_timeout``, ...).
    With ``resume``, the run's own config and algorithm; ``distribution`` (other than "auto") and
    ``backends`` replace the run's for the resumed part (and are recorded for the next).
    ``resources``: a ``hqflow.resources.ResourceWatcher`` whose file changes the pool while the
    run goes on (a job backend's pool, under a distribution that runs in this process: a Ray
    worker's job client keeps the pool it started with); the changes go to ``resources.jsonl``.
    ``tensorboard``: also write TensorBoard event files to ``run_dir/tensorboard`` (CleanRL's tags:
    ``charts/episodic_return`` per episode, ``charts/mean_return_10``, ``losses/loss``, ``charts/spend``,
    against environment steps).
    Returns ``returns`` (every episode's return), ``episodes_to_solve``, ``seconds``,
    ``env_steps`` (steps of the episodes the learner got), ``env_steps_per_s``, ``env_steps_taken``
    (steps the actors ran, with episodes still running at the end: with autoreset they exceed
    ``env_steps``), ``env_steps_taken_per_s``, ``circuit_evals``, ``circuit_evals_per_s``,
    ``updates``, the final ``params``, the ``spans`` and the scheduler's ``stats``.

    When the run fails (a job out of retries, say) the last completed update's checkpoint,
    metrics and spans are written first, then ``hqflow.RunFailed`` is raised: fix the
    backend and ``resume``.
    """
    run_dir = Path(run_dir) if run_dir is not None else None
    ckpt = None
    if not resume:
        mod, policy_ = algorithm(algo), None
    else:
        meta, ckpt = load_run(run_dir)
        algo = meta["algo"]
        policy_ = get_distribution(meta.get("distribution", "sync"), **meta.get("distribution_options", {})) \
            if distribution in (None, "auto") else get_distribution(distribution)
        if backends is None and meta.get("backends"):
            backends = {name: [(m[0], m[1]) for m in pool] for name, pool in meta["backends"].items()}
        scheduler.setdefault("run_id", meta.get("run_id"))
        mod = algorithm(algo)
        cfg = mod.Config(**meta["config"])
    cfg = _pinned_encoding(cfg or mod.Config(), fresh=ckpt is None)
    in_process, devices = backend_facts(cfg.backend, backends)
    if resources is not None and in_process:
        raise ValueError(f"elastic resources need a pool of job backends: {cfg.backend!r} runs in process")
    if policy_ is None:
        policy_ = default_distribution(in_process) if distribution in (None, "auto") else get_distribution(distribution)
    if resources is not None and policy_.scheduler_config().executor is ExecutorKind.RAY:
        raise ValueError(f"elastic resources need a distribution that runs in this process, not {policy_.name} on "
                         "Ray (its workers keep the pool they started with)")
    cfg = mod.resolve(cfg, in_process, devices)
    spec_solved = mod.solved_threshold(cfg)
    window_n = mod.solve_window(cfg)  # episodes the criterion averages
    state = initial_state(algo, cfg)
    if ckpt is not None:
        _check_state(ckpt["state"], state, run_dir / "checkpoint.pt")
        state = ckpt["state"]
    done = {"returns": [], "env_steps": 0, "env_steps_taken": 0, "circuit_evals": 0, "seconds": 0.0, "update": -1,
            "solved_at": None, "spend": 0.0, "metrics": []}
    if ckpt is not None:
        done.update({k: ckpt.get(k, done[k]) for k in done})
        if scheduler.get("budget") is not None:  # the budget is the whole run's: what the resumed part may spend
            scheduler["budget"] = max(0.0, scheduler["budget"] - done["spend"])
    if run_dir is not None:
        run_dir.mkdir(parents=True, exist_ok=True)
        part = {"distribution": policy_.name, "distribution_options": dataclasses.asdict(policy_),  # a placement
                "backends": _json_pools(backends)}  # as a dict
        if ckpt is None:
            scheduler.setdefault("run_id", uuid.uuid4().hex)  # job ids derive from it; --resume reuses it
            meta = {"algo": algo, "run_id": scheduler["run_id"], **part, "config": dataclasses.asdict(cfg)}
            atomic_text(run_dir / "config.json", json.dumps(meta, indent=2))
        elif json.loads(json.dumps(part)) != {k: meta.get(k) for k in part}:  # the next resume takes these
            meta.update(part)
            atomic_text(run_dir / "config.json", json.dumps(meta, indent=2))
        _log_resources(run_dir, {"event": "resume" if ckpt else "start", "update": done["update"] + 1, **part})
        # a killed run may have logged updates past its checkpoint: they will be redone
        rows = done["metrics"] if ckpt is None or "metrics" in ckpt else _metrics_rows(run_dir, done["update"])
        atomic_text(run_dir / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    n_updates = mod.updates(cfg)
    t0, last = time.perf_counter(), {"state": state}

    sched = None

    def spent() -> tuple[float, str | None]:
        """The run's spend on priced jobs, with the updates before a resume, and its currency."""
        service = getattr(sched, "service", None)
        figures = service.figures() if service else {"spend": 0.0, "currency": None}
        return done["spend"] + figures["spend"], figures["currency"]

    def checkpoint() -> None:
        if run_dir is not None:
            data = dict(done, state=last["state"], seconds=done["seconds"] + time.perf_counter() - t0,
                        spend=spent()[0])
            atomic_write(run_dir / "checkpoint.pt", lambda p: torch.save(data, p))

    def finished() -> bool:
        """Solved (when the config stops there), or the episode budget spent: an update that completes
        fewer episodes than expected (PPO's rollouts end mid-episode) does not stretch the run."""
        return (done["solved_at"] is not None and cfg.stop_when_solved) or len(done["returns"]) >= cfg.max_episodes

    def stream():
        for k in range(done["update"] + 1, n_updates):
            if finished():
                return
            yield {"step": k}

    def on_update(_n, out) -> None:
        if finished():
            return  # an update admitted before the stop: not part of the run
        report = out["report"]
        done["update"] += 1
        done["returns"] += report["returns"]
        done["env_steps"] += report["env_steps"]
        done["env_steps_taken"] += report["env_steps_taken"]
        done["circuit_evals"] += report["circuit_evals"]
        last["state"] = {"learn.params": out["params"], "learn.opt": out["opt"], "learn.extra": out["extra"]}
        if "carry" in out:
            last["state"]["rollout.carry"] = out["carry"]
        window = done["returns"][-window_n:]
        if done["solved_at"] is None and len(window) == window_n and np.mean(window) >= spec_solved:
            done["solved_at"] = len(done["returns"])
        row = {"update": done["update"], "episodes": len(done["returns"]), "returns": report["returns"],
               "lengths": report["lengths"], f"mean_return_{window_n}": float(np.mean(window)) if window else None,
               "loss": None if report["loss"] != report["loss"] else report["loss"],  # NaN (no gradient step) -> null
               "losses": report["losses"],
               "env_steps": done["env_steps"], "seconds": round(done["seconds"] + time.perf_counter() - t0, 4)}
        spend, currency = spent()
        if currency is not None:  # priced jobs: the run's spend so far
            row["spend"], row["currency"] = round(spend, 6), currency
        done["metrics"].append(row)  # checkpoints hold every row: a resume rewrites metrics.jsonl from them
        if board is not None:
            _board_row(board, row, done["env_steps"], window_n)
        if run_dir is not None:
            with open(run_dir / "metrics.jsonl", "a") as fh:
                fh.write(json.dumps(row) + "\n")
            if (done["update"] + 1) % checkpoint_every == 0:
                checkpoint()
        if progress is not None:  # the run's own clock ("seconds"), which the summary reports too
            shown = {"reward": row[f"mean_return_{window_n}"] or 0.0, "seconds": row["seconds"]}
            if "spend" in row:
                shown["spend"] = row["spend"]
            progress(len(done["returns"]), shown)

    graph = build_graph(algo, cfg, policy_.staleness, () if in_process else (cfg.backend,))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny batches: one thread is fastest, and no OpenMP teams fight
    config = dataclasses.replace(policy_.scheduler_config(seed=cfg.seed), **scheduler)

    def save(spans) -> None:
        checkpoint()
        if run_dir is not None:
            save_spans(str(run_dir / "spans.json"), spans)
            write_chrome_trace(str(run_dir / "trace.json"), spans)
            plot_learning_curve(done["returns"], run_dir / "learning_curve.png", f"{algo} on {cfg.env}")

    board = None
    if run_dir is not None and tensorboard:  # a resume drops the events past its checkpoint, as metrics.jsonl does
        from torch.utils.tensorboard import SummaryWriter

        board = SummaryWriter(str(run_dir / "tensorboard"), purge_step=done["env_steps"] + 1 if ckpt else None)
        if ckpt is None:  # as CleanRL: the settings as a table
            board.add_text("hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(
                f"|{k}|{v}|" for k, v in dataclasses.asdict(cfg).items()))
    def changed(change: dict) -> None:
        """A pool change while the run goes on: a line of resources.jsonl, and config.json's pools (a later
        resume takes them)."""
        if run_dir is None:
            return
        pools = dict(meta.get("backends") or {}, **{change["pool"]: change["backends"]})
        stored = _json_pools({name: [tuple(m) for m in specs] for name, specs in pools.items()})  # no secrets
        try:
            meta["backends"] = stored
            atomic_text(run_dir / "config.json", json.dumps(meta, indent=2))
            _log_resources(run_dir, {"event": "change", "update": done["update"] + 1, **change,
                                     "backends": stored[change["pool"]]})
        except OSError as exc:
            print(f"hqflow: resources: cannot record the change in {run_dir}: {exc.strerror}", file=sys.stderr)

    try:
        sched = Scheduler(graph, backends, config)
        if resources is not None:
            resources.attach(sched, backends or {cfg.backend: [cfg.backend]}, changed)
        result = sched.run(stream(), initial_state=state, progress=on_update)
    except hq.RunFailed as exc:
        save(exc.result.spans)  # the last completed update stays resumable
        raise
    except KeyboardInterrupt:
        checkpoint()  # Ctrl-C: the last completed update stays resumable too
        raise
    finally:
        if resources is not None:
            resources.close()
        torch.set_num_threads(threads)
        if board is not None:
            board.close()
    seconds = done["seconds"] + time.perf_counter() - t0
    save(result.spans)
    return {"algo": algo, "config": dataclasses.asdict(cfg), "distribution": policy_.name,
            "returns": done["returns"], "episodes_to_solve": done["solved_at"], "updates": done["update"] + 1,
            "seconds": seconds, "env_steps": done["env_steps"], "env_steps_per_s": done["env_steps"] / seconds,
            "env_steps_taken": done["env_steps_taken"], "env_steps_taken_per_s": done["env_steps_taken"] / seconds,
            "circuit_evals": done["circuit_evals"], "circuit_evals_per_s": done["circuit_evals"] / seconds,
            "params": last["state"]["learn.params"], "spans": result.spans, "stats": result.extra,
            "spend": spent()[0], "currency": spent()[1]}


def _board_row(board, row: dict, env_steps: int, window_n: int) -> None:
    """One update's figures as TensorBoard scalars with CleanRL's tags, against environment steps: every
    episode the update completed (at the update's step), SPS, the learner's losses, and hqflow's own
    solve criterion and spend."""
    for r, n in zip(row["returns"], row["lengths"]):
        board.add_scalar("charts/episodic_return", r, env_steps)
        board.add_scalar("charts/episodic_length", n, env_steps)
    if row["seconds"] > 0:
        board.add_scalar("charts/SPS", int(env_steps / row["seconds"]), env_steps)
    for name, value in row["losses"].items():
        board.add_scalar(f"losses/{name}", value, env_steps)
    if row.get(f"mean_return_{window_n}") is not None:
        board.add_scalar(f"charts/mean_return_{window_n}", row[f"mean_return_{window_n}"], env_steps)
    if "spend" in row:
        board.add_scalar("charts/spend", row["spend"], env_steps)


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
