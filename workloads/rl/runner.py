"""The one training driver: an RL algorithm (``algorithm.Algorithm``) as a dataflow graph under a
distribution policy, with a run directory (``rundir.RunDir``). Each update (stream item ``{"step": k}``) is::

    rollout (cpu) --batch--> learn (gpu: the learner's own slot)
    learn.params ~> rollout.params (max_staleness = the policy's staleness)
    learn.params, learn.opt, learn.extra ~> learn.* (strictly sequential)
    rollout.carry ~> rollout.carry (only with an actor that carries state: it orders the rollouts)

Resolved once (``setup``), the fragments get the frozen config itself; on a job backend both declare it in
``job_backends``, so every circuit job goes through the scheduler's pool (the README's "On a QPU"). Fragments are
pure functions of their inputs, so a checkpoint (the engine's, with the run's record in it: ``_Tally``) is their
latest values and a resumed run continues bit for bit, under another distribution or pool too (Tenplex-style: at
staleness 0 on exact backends of the same kind, to the same result).
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import importlib
import json
import threading
import time
import uuid
from collections.abc import Mapping

import numpy as np
import torch
from hqflow.backends import Usage, is_backend
from hqflow.ir import Graph

import hqflow as hq
from hqflow.engine.collective import reduce, replica
from hqflow.engine.distribution import get_distribution
from hqflow.backends import backend_spec, make_backend
from hqflow.engine import checkpoint
from hqflow.engine.scheduler_config import ExecutorKind
from hqflow.engine.scheduler import Scheduler
from hqflow.gradients import GradientMethod, estimate
from hqflow.jobs import accounting
from hqflow.torch import ReducedGradients, differentiates, seeded
from hqflow.workloads.rl.algorithm import Algorithm, policy_options
from hqflow.workloads.rl.algorithm import params as _params
from hqflow.workloads.rl.envs import EnvImportError, get_spec, legacy_encoding
from hqflow.workloads.rl.policies import circuits, learning_on_twin, shard_rows
from hqflow.workloads.rl.rundir import RunDir, RunDirError, json_pools

ALGORITHMS = {"reinforce": "hqflow.workloads.rl.reinforce", "dqn": "hqflow.workloads.rl.dqn",
              "ppo": "hqflow.workloads.rl.ppo"}


def algorithm(name: str) -> Algorithm:
    """The algorithm registered as ``name`` (its declared interface, ``algorithm.Algorithm``)."""
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; known: {', '.join(ALGORITHMS)}")
    return importlib.import_module(ALGORITHMS[name]).ALGORITHM


# --- where the circuit runs, resolved once ----------------------------------------------------

_BACKENDS: dict[str, object] = {}  # this process's in-process backends, by key: each made once
_BACKENDS_LOCK = threading.Lock()


def local_backend(key: str):
    """This process's in-process backend ``key`` (a ``Placement.local``): made on first use (a Ray worker)."""
    with _BACKENDS_LOCK:
        if key not in _BACKENDS:
            _BACKENDS[key] = make_backend(tuple(json.loads(key)))
        return _BACKENDS[key]


_frozen = dataclasses.dataclass(frozen=True, eq=False)


@_frozen
class Placement:
    """Where the policy's circuit runs: the backend (or pool) ``name``, its members as given (``specs``: names,
    ``(name, options)`` or backend objects), each made once, here (``members``)."""

    name: str
    specs: tuple
    members: tuple

    @classmethod
    def of(cls, name: str, backends: Mapping | None = None, make=None) -> Placement:
        """``name``'s pool in ``backends`` (or the registry backend ``name``), each member made once with
        ``make(spec, index)`` (``hqflow.backends.make_backend`` by default; an in-process one only once per process)."""
        specs = (backends or {}).get(name, name)
        specs = tuple(specs if isinstance(specs, list) else [specs])
        key = _key(specs[0]) if len(specs) == 1 else None
        members = [_BACKENDS[key]] if key in _BACKENDS else []
        try:
            for k, spec in enumerate(specs[len(members):]):
                members.append(make(spec, k) if make is not None else make_backend(spec))
        except BaseException:
            for spec, member in zip(specs, members):
                if not is_backend(spec):
                    member.close()
            raise
        placement = cls(name, specs, tuple(members))
        if placement.local is not None:
            with _BACKENDS_LOCK:
                _BACKENDS.setdefault(placement.local, placement.members[0])
        return placement

    @property
    def in_process(self) -> bool:
        """One member that differentiates in process: the policy calls it directly, with no jobs."""
        return len(self.members) == 1 and differentiates(self.members[0])

    @property
    def devices(self) -> int:
        """The pool's device slots."""
        return sum(int(b.max_in_flight or 1) for b in self.members)

    @property
    def local(self) -> str | None:
        """The in-process member's key in every process's table (``local_backend``); None for job backends."""
        return _key(self.specs[0], self.members[0]) if self.in_process else None

    def pools(self, ray: bool) -> dict | None:
        """The scheduler's pools: the members (specs on Ray, whose workers make their own); None in process."""
        return None if self.in_process else {self.name: list(self.specs if ray else self.members)}

    def close(self) -> None:
        """Close the job-backend members made here (an in-process one stays: the process's, for later runs)."""
        for spec, member in zip(self.specs, self.members):
            if not self.in_process and not is_backend(spec):
                member.close()


def _key(spec, member=None) -> str | None:
    if is_backend(spec):
        return None if member is None else f"object:{id(member)}"
    return json.dumps(backend_spec(spec), sort_keys=True)


@_frozen
class Setup:
    """A run resolved once at its start: the algorithm, its config for where the circuit runs, the placement."""

    name: str
    algo: Algorithm
    cfg: object
    placement: Placement

    @property
    def updates(self) -> int:
        return self.algo.updates(self.cfg)

    def graph(self, staleness: int = 0) -> Graph:
        return build_graph(self.name, self.cfg, staleness, () if self.placement.in_process else (self.cfg.backend,),
                           self.placement.local)

    def default_distribution(self):
        """``sync`` in process (threads would cost more than they overlap); on a job backend ``pipelined`` with
        staleness 1 and one actor, so the learner's work overlaps the next rollout's jobs."""
        if self.placement.in_process:
            return get_distribution("sync")
        return get_distribution("pipelined", staleness=1, actors=1)


def setup(name: str, cfg=None, backends=None, *, fresh: bool = True) -> Setup:
    """Resolve a run: ``cfg``'s observation encoding pinned (``fresh``: as it is now), the pool members made
    (``backends``: a mapping of pools, or a ``Placement``), the backend-dependent settings decided."""
    algo = algorithm(name)
    cfg = _pinned_encoding(cfg or algo.Config(), fresh)
    placement = backends if isinstance(backends, Placement) else Placement.of(cfg.backend, backends)
    return Setup(name, algo, algo.resolve(cfg, placement.in_process, placement.devices), placement)


def _pinned_encoding(cfg, fresh: bool):
    """``cfg`` with an ``obs_encoding`` of "auto" made the one it stands for now (box, running, binary,
    onehot; a short name's own stays "auto"), so the run directory records it. A run from before
    running statistics recorded "auto" where a Box then meant "box" (``load_policy`` reads it so too)."""
    if cfg.obs_encoding != "auto":
        return cfg
    name = get_spec(cfg.env).obs_encoding if fresh else legacy_encoding(cfg.env, "auto")
    return cfg if name == "auto" else dataclasses.replace(cfg, obs_encoding=name)


# --- the two fragments -------------------------------------------------------------------

_LOCAL = threading.local()


def _scratch(algo: str, cfg, local: str | None, role: str):
    """This thread's (policy, optimizer, envs) for a run: scratch state, overwritten every call."""
    cache = _LOCAL.__dict__.setdefault("cache", {})
    key = (algo, cfg, local, role)
    if key not in cache:
        mod = algorithm(algo)
        policy = mod.make_policy(cfg, None if local is None else local_backend(local))
        cache[key] = (policy, mod.make_optimizer(policy, cfg) if role == "learner" else None,
                      mod.make_envs(cfg) if role == "actor" else None)
    return cache[key]


def rollout(params, step, algo, cfg, local=None, carry=None):
    """The actor: run the environments with ``params`` (and the ``carry`` of an algorithm that keeps state between
    updates, ``init_carry``: then an input port); what its jobs used."""
    policy, _, envs = _scratch(algo, cfg, local, "actor")
    policy.load_state_dict(params)
    with accounting.meter() as used, seeded(cfg.seed, int(step), "act"):  # shot seeds: a function of (seed, step)
        batch, kept = algorithm(algo).act(policy, envs, cfg, int(step), None if carry is None else carry["value"])
    return {"batch": batch, "usage": used.total} | ({} if carry is None else {"carry": {"value": kept}})


def learn(batch, params, opt, extra, step, algo, cfg, local=None):
    """The learner: one update from ``(params, opt, extra)`` and the actor's batch; its ``report``.

    As one of several replicas (the ``multi-learner`` policy, ``hqflow.engine.collective``), it
    differentiates its share of every batched circuit call and the gradients are reduced at the end
    of each backward pass: every replica applies the whole batch's update, as one learner would.
    """
    mod = algorithm(algo)
    left = cfg.max_episodes - extra["episodes"]
    if left < 1:  # admitted before the run stopped at its episode budget: nothing of it is part of the run
        return {"params": params, "opt": opt, "extra": extra, "report": {
            "returns": [], "lengths": [], "env_steps": 0, "env_steps_taken": 0, "circuit_evals": 0,
            "loss": float("nan"), "losses": {}, "usage": Usage()}}
    batch = mod.within_budget(batch, cfg, left)  # the budget's last rollout stops on its last episode
    policy, optimizer, _ = _scratch(algo, cfg, local, "learner")
    policy.load_state_dict(params)
    optimizer.load_state_dict(copy.deepcopy(opt))
    rep = replica()
    sharded = shard_rows(policy, *((rep.rank, rep.size) if rep is not None else (None,)))
    try:
        with ReducedGradients(policy, sharded) if rep is not None else contextlib.nullcontext(), \
                accounting.meter() as used, seeded(cfg.seed, int(step), "learn"), \
                learning_on_twin(policy, cfg.gradient is GradientMethod.TWIN):  # every replica: the same seeds; a twin: no QPU
            metrics, value = mod.learn(policy, optimizer, batch, cfg, extra["value"], int(step))
    finally:
        shard_rows(policy, None)
    report = {"returns": [float(r) for r in batch.episode_returns],
              "lengths": [int(n) for n in batch.episode_lengths], "env_steps": int(batch.n_steps),
              "env_steps_taken": int(batch.n_steps if batch.steps_taken < 0 else batch.steps_taken),
              "circuit_evals": int(batch.circuit_evals) + int(metrics.get("circuit_evals", 0)),  # + the learner's
              "loss": float(metrics["loss"]), "losses": {k: float(v) for k, v in metrics["losses"].items()},
              "usage": used.total if rep is None else accounting.across(  # summed over the replicas, in rank order
                  used.total, lambda arrays: reduce(arrays, "sum", key="usage"))}
    return {"params": _params(policy), "opt": copy.deepcopy(optimizer.state_dict()),
            "extra": {"value": value, "episodes": extra["episodes"] + len(batch.episode_returns)}, "report": report}


def build_graph(algo: str, cfg, staleness: int = 0, job_backends: tuple[str, ...] = (),
                local: str | None = None) -> Graph:
    """The two fragments; ``job_backends``: the backend names their jobs go to through the scheduler;
    ``local``: the in-process backend's key (``Placement.local``)."""
    carries = algorithm(algo).init_carry(cfg) is not None  # a rollout.carry loop edge orders the rollouts
    params = {"algo": algo, "cfg": cfg, "local": local}
    pipe = hq.Pipeline(f"{algo}_{cfg.env}")
    pipe.input("step", "scalar")
    pipe.preprocess(rollout, name="rollout", params=params, job_backends=job_backends, inputs={"carry": "any"} if
                    carries else None, outputs={"batch": "any", "usage": "any"} | ({"carry": "any"} if carries else {}))
    pipe.learn(learn, outputs={"params": "any", "opt": "any", "extra": "any", "report": "any"},
               resource="gpu", params=params, job_backends=job_backends)
    pipe.loop("learn.params", "rollout.params", max_staleness=staleness)
    for port in ("params", "opt", "extra"):
        pipe.loop(f"learn.{port}", f"learn.{port}")
    if carries:
        pipe.loop("rollout.carry", "rollout.carry")
        pipe.output("rollout.carry")
    for port in ("params", "opt", "extra", "report"):
        pipe.output(f"learn.{port}")
    pipe.output("rollout.usage")
    return pipe.build()


def initial_state(algo: str, cfg) -> dict:
    mod = algorithm(algo)
    policy = mod.make_policy(cfg)
    optimizer = mod.make_optimizer(policy, cfg)
    state = {"learn.params": _params(policy), "learn.opt": copy.deepcopy(optimizer.state_dict()),
             "learn.extra": {"value": mod.init_extra(cfg, policy), "episodes": 0}}  # boxed: None is a value here;
    # "episodes": those the updates so far completed (the learner's, in order: the budget's count)
    if mod.init_carry(cfg) is not None:
        state["rollout.carry"] = {"value": mod.init_carry(cfg)}
    return state


def circuits_per_env_step(algo: str, cfg) -> tuple[float, int]:
    """``(circuits, parameters)``: what an environment step costs in circuits where the policy's circuit runs
    as jobs (each one service job per measurement group on a cloud target), from the policy's template and
    the algorithm (``Algorithm.circuits_per_step``), and the circuit's parameters (inputs and weights)."""
    mod = algorithm(algo)
    t = circuits(mod.make_policy(cfg))[0].template  # (no backend made)
    rows = 0 if cfg.gradient is GradientMethod.TWIN else estimate(cfg.gradient, t, np.zeros((1, t.n_inputs)), np.zeros(
        t.n_weights), settings=policy_options(cfg)["circuit"]["spsa"], wrt="both")[0].size  # the layer's rows for one row
    return mod.circuits_per_step(cfg, rows), t.n_inputs + t.n_weights


# --- a run directory's run ----------------------------------------------------------------

def load_run(run_dir) -> tuple[dict, dict | None]:
    """``(config.json, last checkpoint or None)`` of a run directory. A directory that is not a run, or a
    damaged ``config.json`` or ``checkpoint.pt``, is a ``RunDirError`` with one line naming the file."""
    rd = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    meta = rd.read_meta()
    try:
        seed = algorithm(meta.get("algo")).Config(**meta["config"]).seed
        if "distribution" in meta:  # (hqflow eval needs none)
            resumed_distribution(meta)
    except EnvImportError as exc:  # the config is sound: its environment's module is not importable here
        raise RunDirError(f"{rd.path}: {exc}") from None
    except (ValueError, TypeError, ImportError) as exc:
        raise RunDirError(f"{rd.path / 'config.json'} is damaged: {' '.join(str(exc).split())}") from None
    return meta, rd.read_checkpoint(meta, seed)


def resumed_distribution(meta: dict):
    """The distribution a run directory's run last ran with."""
    return get_distribution(meta.get("distribution", "sync"), **meta.get("distribution_options", {}))


def complete(name: str, cfg, ckpt: dict) -> bool:
    """Whether a checkpointed run has nothing left to do: its updates done, or solved where it stops there."""
    return ckpt["update"] + 1 >= algorithm(name).updates(cfg) or (cfg.stop_when_solved and
                                                                  ckpt.get("solved_at") is not None)


def check_resume(run_dir, algo: str, cfg, ckpt: dict) -> list[dict]:
    """What ``train(resume=True)`` reads besides ``load_run``: the checkpoint's parameters against the config, and
    ``metrics.jsonl`` where the checkpoint does not hold the rows (``RunDirError``); returns the run's rows."""
    rd = RunDir(run_dir)
    _check_params(ckpt, algo, cfg, rd.path / "checkpoint.pt")
    return ckpt["metrics"] if "metrics" in ckpt else rd.rows(ckpt["update"])


def init_params(run_dir, algo: str, cfg) -> dict:
    """The policy parameters at ``run_dir``'s last checkpoint, for a new run of ``algo`` with ``cfg``
    (``--init-from``): a run of the same algorithm whose parameters have the shapes ``cfg`` makes (else a
    ``RunDirError`` in one line)."""
    meta, ckpt = load_run(run_dir)
    if ckpt is None:
        raise RunDirError(f"{run_dir} has no checkpoint.pt to start from: train it longer, or with --checkpoint-every 1")
    if meta["algo"] != algo:
        raise RunDirError(f"{run_dir} trained {meta['algo']}, not {algo}: a run starts from one of its own algorithm")
    _check_params(ckpt, algo, cfg, RunDir(run_dir).path / "checkpoint.pt", "this run's")
    return ckpt["state"]["learn.params"]


def _check_params(ckpt: dict, algo: str, cfg, path, whose: str = "its run's") -> None:
    """A checkpoint's parameters (what a resumed run computes with) have the names and shapes ``cfg`` makes."""
    saved, fresh = ckpt["state"].get("learn.params"), _params(algorithm(algo).make_policy(cfg))
    if not isinstance(saved, dict) or set(saved) != set(fresh):
        raise RunDirError(f"{path} does not match {whose} config: learn.params differs")
    for k, b in fresh.items():
        if not isinstance(saved[k], torch.Tensor) or saved[k].shape != b.shape:
            shape = list(saved[k].shape) if isinstance(saved[k], torch.Tensor) else type(saved[k]).__name__
            raise RunDirError(f"{path} does not match {whose} config: learn.params.{k} is {shape}, "
                              f"expected {list(b.shape)}")


# --- training ------------------------------------------------------------------------------

def train(algo: str = "reinforce", cfg=None, distribution="auto", run_dir=None, resume: bool = False,
          checkpoint_every: int = 5, progress=None, backends=None, tensorboard: bool = True,
          resources=None, paid_before: tuple | None = None, init_from=None, **scheduler) -> dict:
    """Train, writing the run directory (``rundir``); ``resume`` continues ``run_dir`` from its checkpoint.

    ``distribution``: a policy or its name; ``"auto"``: ``sync`` on an in-process backend, ``pipelined``
    (staleness 1) on a job backend. ``backends`` maps ``cfg.backend`` to a pool, as ``hq.run`` takes it (or is
    a ``Placement``); ``scheduler`` are ``SchedulerConfig`` fields (``max_retries``, ``budget``, ...).
    With ``resume``, the run's own config and algorithm; ``distribution`` (other than "auto") and ``backends``
    replace the run's for the resumed part (and are recorded for the next). ``resources``: a
    ``hqflow.cli.resources.ResourceWatcher`` whose file changes a job pool while the run goes on (not on Ray).
    ``tensorboard``: CleanRL's tags against environment steps (every episode of an update at the update's step).
    ``paid_before``: ``(spend, shots, currency)`` the run paid before it started (``--plan auto``'s calibration),
    where its ledger starts, so its budget counts it. ``init_from``: a run directory whose policy (at its last
    checkpoint; ``init_params``) a new run starts from instead of its seed's (kept as ``init.pt``).

    Returns ``returns`` (every episode's), ``episodes_to_solve``, ``updates``, ``seconds``, ``env_steps`` (of
    the episodes the learner got), ``env_steps_taken`` (the actors', with unfinished episodes), their rates,
    ``circuit_evals``, the final ``params``, ``spans``, the scheduler's ``stats``, ``usage`` (the updates' jobs, as
    ``metrics.jsonl`` counts them), ``paid`` (every job the run paid for, in every process of it: also those of
    work a stop or a kill cut short) and ``spend`` (what ``paid`` cost, the budget's count). A failed run
    (a job out of retries, say) writes the last update's checkpoint, metrics and spans, then raises
    ``hqflow.RunFailed``: fix the backend and ``resume``.
    """
    rd, ckpt = RunDir(run_dir, tensorboard), None
    if resume:
        meta, ckpt = load_run(rd)
        algo, cfg = meta["algo"], algorithm(meta["algo"]).Config(**meta["config"])
        if distribution in (None, "auto"):
            distribution = resumed_distribution(meta)
        if backends is None and meta.get("backends"):
            backends = {name: [(m[0], m[1]) for m in pool] for name, pool in meta["backends"].items()}
        scheduler.setdefault("run_id", meta.get("run_id"))
    init = None if resume or init_from is None else init_params(init_from, algo, cfg)
    run = setup(algo, cfg, backends, fresh=ckpt is None)
    try:
        return _train(run, rd, ckpt, resume, distribution, progress, resources, paid_before, init,
                      dict(scheduler, checkpoint_every=checkpoint_every))
    finally:
        if not isinstance(backends, Placement):
            run.placement.close()


def _train(run: Setup, rd: RunDir, ckpt, resume, distribution, progress, resources, paid_before, init,
           scheduler) -> dict:
    cfg, placement = run.cfg, run.placement
    policy = run.default_distribution() if distribution in (None, "auto") else get_distribution(distribution)
    if resources is not None and placement.in_process:
        raise ValueError(f"elastic resources need a pool of job backends: {cfg.backend!r} runs in process")
    ray = policy.scheduler_config().executor is ExecutorKind.RAY
    if resources is not None and ray:
        raise ValueError(f"elastic resources need a distribution that runs in this process, not {policy.name} on "
                         "Ray (its workers keep the pool they started with)")
    state = initial_state(run.name, cfg)
    init = rd.initial(init) if ckpt is None else None  # (a resume before the first checkpoint: init.pt again)
    if init is not None:
        state["learn.params"] = init
    if ckpt is not None:  # (a killed run may have logged updates past its checkpoint: they will be redone)
        ckpt["metrics"] = check_resume(rd.path, run.name, cfg, ckpt)
    tally = _Tally.of(ckpt or {"state": state}, run, rd)
    # the budgets are the whole run's: the ledger's file holds what every process of the run paid
    scheduler.setdefault("ledger", rd.ledger(resume, (tally.spend, tally.usage["shots"], tally.usage["currency"])
                                             if resume else paid_before))
    pools = None if placement.specs == (placement.name,) else {placement.name: list(placement.specs)}
    part = {"distribution": policy.name, "distribution_options": policy.options(),  # a placement
            "backends": json_pools(pools)}
    if ckpt is None:
        scheduler.setdefault("run_id", uuid.uuid4().hex)  # job ids derive from it; --resume reuses it
    rd.start({"algo": run.name, "run_id": scheduler["run_id"], **part, "config": dataclasses.asdict(cfg)}, part,
             tally.metrics, tally.update + 1, fresh=ckpt is None)
    config = dataclasses.replace(policy.scheduler_config(seed=cfg.seed), **scheduler, resume=ckpt is not None,
                                 run_dir=None if rd.path is None else str(rd.path))
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    try:
        sched = Scheduler(run.graph(policy.staleness), placement.pools(ray), config)
        tally.sched = sched
        if resources is not None:
            resources.attach(sched, {placement.name: list(placement.specs)},
                             lambda change: rd.changed(change, tally.update + 1))
        result = sched.run(tally.stream(), initial_state=state, record=tally,  # checkpointed with the run's record
                           progress=None if progress is None else lambda _n, _out: tally.show(progress))
    except hq.RunFailed as exc:  # (the last completed update is checkpointed, as at Ctrl-C)
        rd.finish(exc.result.spans, tally.returns, f"{run.name} on {cfg.env}")
        raise
    finally:
        if resources is not None:
            resources.close()
        torch.set_num_threads(threads)
        rd.close()
    out = tally.summary(run, policy.name, result)
    rd.finish(result.spans, tally.returns, f"{run.name} on {cfg.env}")
    return out


@dataclasses.dataclass
class _Tally(checkpoint.Record):
    """The run's record so far, kept in the checkpoint (a resume goes on from it), and what updates it: each
    update that is part of the run (``add``)."""

    returns: list
    env_steps: int = 0
    env_steps_taken: int = 0
    circuit_evals: int = 0
    seconds: float = 0.0
    update: int = -1
    solved_at: int | None = None
    spend: float = 0.0
    usage: dict = dataclasses.field(default_factory=lambda: Usage().as_dict())  # the jobs' totals (Usage)
    metrics: list = dataclasses.field(default_factory=list)

    @classmethod
    def of(cls, ckpt: dict, run: Setup, rd: RunDir) -> _Tally:
        tally = cls(**{f.name: ckpt[f.name] for f in dataclasses.fields(cls) if f.name in ckpt}
                    | {"returns": list(ckpt.get("returns", []))})
        tally.run, tally.window = run, run.algo.solve_window(run.cfg)  # episodes the criterion averages
        tally.threshold, tally.params, tally.sched, tally.t0 = run.algo.solved_threshold(run.cfg), \
            ckpt["state"]["learn.params"], None, time.perf_counter()
        tally.rd, tally.shown, tally.resumed = rd, tally.update, ckpt.get("saved")  # (the engine goes on from it)
        return tally

    def spent(self) -> tuple[float, str | None]:
        """What the run paid for priced jobs, every process of it (the ledger's), and its currency; without a
        run directory's ledger, this process's and the checkpoint's."""
        service = None if self.sched is None else self.sched.service
        figures = service.figures() if service else {"spend": 0.0, "currency": None, "spend_before": 0.0}
        before = self.spend if self.sched is None or self.sched.config.ledger is None else figures["spend_before"]
        return before + figures["spend"] - figures["spend_before"], figures["currency"] or self.usage["currency"]

    def elapsed(self) -> float:
        return self.seconds + time.perf_counter() - self.t0

    def finished(self) -> bool:
        """Solved (when the config stops there), or the episode budget spent: an update that completes
        fewer episodes than expected (PPO's rollouts end mid-episode) does not stretch the run."""
        cfg = self.run.cfg
        return (self.solved_at is not None and cfg.stop_when_solved) or len(self.returns) >= cfg.max_episodes

    def stream(self):  # (a resumed run's first updates: skipped by the engine)
        for k in range(self.run.updates):
            if k > self.update and self.finished():
                return
            yield {"step": k}

    def saved(self) -> dict:
        record = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return dict(record, seconds=self.elapsed(), spend=self.spent()[0])

    def add(self, step: int, out: dict) -> bool:
        """An update's outputs: the record and its row of metrics (and TensorBoard); False for an update
        admitted before the run stopped (not part of it)."""
        if self.finished():
            return False
        report = out["report"]
        self.update += 1
        self.returns += report["returns"]
        self.env_steps += report["env_steps"]
        self.env_steps_taken += report["env_steps_taken"]
        self.circuit_evals += report["circuit_evals"]
        self.params = out["params"]
        window, n = self.returns[-self.window:], self.window
        if self.solved_at is None and len(window) == n and np.mean(window) >= self.threshold:
            self.solved_at = len(self.returns)
        row = {"update": self.update, "episodes": len(self.returns), "returns": report["returns"],
               "lengths": report["lengths"], f"mean_return_{n}": float(np.mean(window)) if window else None,
               "loss": None if report["loss"] != report["loss"] else report["loss"],  # NaN (no gradient step) -> null
               "losses": report["losses"], "env_steps": self.env_steps, "seconds": round(self.elapsed(), 4)}
        self._used(accounting.plus(out.get("usage", Usage()), report.get("usage", Usage())), row)
        self.metrics.append(row)  # checkpoints hold every row: a resume rewrites metrics.jsonl from them
        self.rd.log(row, _scalars(row, n), self.env_steps)
        return True

    def show(self, progress) -> None:
        """The last update's progress, once (the run's own clock, "seconds", which the summary reports too)."""
        if self.shown != self.update:
            self.shown, row = self.update, self.metrics[-1]
            shown = {"reward": row[f"mean_return_{self.window}"] or 0.0, "seconds": row["seconds"], "row": row}
            if row.get("spend") is not None:  # ("row": not shown)
                shown["spend"] = row["spend"]
            progress(len(self.returns), shown)

    def _used(self, used: Usage, row: dict) -> None:
        """An update's usage into the totals, and (once the run has used a service) into its row."""
        total = accounting.plus(Usage(**self.usage), used)
        self.usage = total.as_dict()
        if total.circuits:  # the update's jobs and the updates' so far: what the metrics row says, whatever the timing
            row.update(service_jobs=used.service_jobs, circuits=used.circuits, shots=used.shots,
                       list_cost=record_amount(used.cost), service_jobs_total=total.service_jobs,
                       circuits_total=total.circuits, shots_total=total.shots, list_cost_total=record_amount(total.cost))
            if total.currency is not None:  # priced jobs: the updates' spend so far
                row["spend"], row["currency"] = record_amount(total.cost), total.currency

    def summary(self, run: Setup, distribution: str, result) -> dict:
        seconds = self.elapsed()
        spend, currency = self.spent()
        paid = result.extra.get("paid") or self.usage  # every job the run paid for: its ledger's, all processes
        spend = record_amount(spend + 0 * paid["cost"])  # None where a job's price is unknown: never counted free
        return {"algo": run.name, "config": dataclasses.asdict(run.cfg), "distribution": distribution,
                "returns": self.returns, "episodes_to_solve": self.solved_at, "updates": self.update + 1,
                "seconds": seconds, "env_steps": self.env_steps, "env_steps_per_s": self.env_steps / seconds,
                "env_steps_taken": self.env_steps_taken, "env_steps_taken_per_s": self.env_steps_taken / seconds,
                "circuit_evals": self.circuit_evals, "circuit_evals_per_s": self.circuit_evals / seconds,
                "params": self.params, "spans": result.spans, "stats": result.extra,
                "spend": spend, "currency": currency, "usage": self.usage, "paid": paid,
                "usage_per_episode": {k: v / max(1, len(self.returns)) for k, v in self.usage.items()
                                      if k != "currency"}}


def record_amount(amount: float) -> float | None:
    """An amount for the record: None where a price is unknown (NaN), never 0."""
    return None if amount != amount else round(amount, 6)


def _scalars(row: dict, window: int) -> list[tuple[str, float]]:
    """An update's TensorBoard scalars, CleanRL's tags first: every episode it completed, SPS, its losses."""
    out = [(tag, v) for r, n in zip(row["returns"], row["lengths"])
           for tag, v in (("charts/episodic_return", r), ("charts/episodic_length", n))]
    if row["seconds"] > 0:
        out.append(("charts/SPS", int(row["env_steps"] / row["seconds"])))
    out += [(f"losses/{name}", value) for name, value in row["losses"].items()]
    if row[f"mean_return_{window}"] is not None:
        out.append((f"charts/mean_return_{window}", row[f"mean_return_{window}"]))
    if row.get("spend") is not None:
        out.append(("charts/spend", row["spend"]))
    out += [(f"cost/{k}", row[k]) for k in ("service_jobs", "circuits", "shots", "list_cost", "list_cost_total")
            if row.get(k) is not None]
    return out
