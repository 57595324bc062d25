"""``hqflow train``: RL training of a variational quantum policy, with a run directory.

    hqflow train cartpole                          # REINFORCE, softmax-PQC, compiled simulator
    hqflow train frozenlake --algo dqn --episodes 500
    hqflow train MyEnv-v0 --env-module mypkg.envs  # your own (or mypkg.envs:MyEnv-v0, or an entry point)
    hqflow train cartpole --backend emulated-qpu --backend-opt per_job=0.05 --pool 2 \
        --backend-opt 1:failure_rate=0.2          # two emulated QPUs, the second flaky
    hqflow train cartpole --backend emulated-qpu --pool 3 --plan auto --profile qpu.json   # the cost model chooses
    hqflow train --resume runs/reinforce-cartpole-seed0 --pool 3  # the rest on three such QPUs
    hqflow train cartpole --resources pool.json    # the pool follows pool.json mid-run (kill -HUP PID: read it now)

A resumed run keeps its algorithm (ENV, --algo, --seed, --set, --episodes) and may change its pool and
distribution: at staleness 0 on exact backends of the run's kind it ends bit-identical to an undisturbed
run, and under multi-learner up to floating-point summation order (float64: about 1e-10). A change that
cannot keep the result says so in one line. config.json records the latest settings (a later --resume
takes them) and resources.jsonl each part's and each mid-run change.
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import sys
import tempfile

from hqflow.backends import BackendAccessError, BackendError
from hqflow.ir.text import one_line

from .plan import QUOTES, fold, save_profile, saved_profile
from .cost import check_target, cost_overrides, cost_report, say_step_cost, spend_figures
from .resources import file_pool, in_process, watching
from .pool import (UsageError, backend_pool, importable_cwd, key_value, make_folder, make_member, show_figures,
                   with_module)
from hqflow.engine.result import RunFailed
from hqflow.jobs.service import BudgetExceeded
from hqflow.jobs.ledger import ShotBudgetExceeded


class RunStopped(RuntimeError):
    """Training failed mid-run; the message says how to resume (exit code 1, one line)."""


def _config(args, runner):
    """--algo's module, and its Config with ENV, --seed, --episodes, --backend, the cost flags and --set."""
    try:
        mod = runner.algorithm(args.algo or "reinforce")
    except (ValueError, ImportError) as exc:
        raise UsageError(str(exc)) from None
    overrides = dict(key_value(item, "--set", {f.name for f in dataclasses.fields(mod.Config)}) for item in args.set)
    given = {"env": args.env, "seed": args.seed, "max_episodes": args.episodes, "backend": args.backend,
             **cost_overrides(args)}
    overrides.update({k: v for k, v in given.items() if v is not None})
    try:
        return mod, mod.Config(**overrides)
    except (TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from None


@contextlib.contextmanager
def _closing(placement, refused=(), say=str):
    """Close ``placement`` when the block raises; an error of a ``refused`` kind becomes ``UsageError(say(exc))``."""
    try:
        yield
    except BaseException as exc:
        placement.close()
        if isinstance(exc, refused):
            raise UsageError(say(exc)) from None
        raise


def _placement(runner, name: str, pool: list | None, watcher=None):
    """The run's backend ``name`` (or its ``pool``) made once (``runner.Placement``). An in-process pool (the
    policy calls it directly) that stands in for another backend, or that a resources file would change, is
    refused."""
    placement = runner.Placement.of(name, None if pool is None else {name: pool}, make=make_member)
    what = "--backend" if watcher is None else "--resources"
    if pool is not None and placement.in_process and (what == "--resources" or pool[0] != (name, {})):
        placement.close()
        raise UsageError(f"{what}: {pool[0][0]!r} alone runs in process, where no pool can change or stand in "
                         f"for {name!r}: give a job backend such as emulated-qpu, or two or more members")
    return placement


def _resumed(args, meta: dict, cfg, runner, watcher):
    """The distribution and placement the resumed part runs with, and a warning line when they cannot keep an
    undisturbed run's result (or None)."""
    from hqflow.torch import differentiates

    saved = runner.resumed_distribution(meta)
    policy = _distribution(args, saved)
    in_process(policy, watcher)
    old = [tuple(m) for m in (meta.get("backends") or {}).get(cfg.backend, [(cfg.backend, {})])]
    if watcher is not None:
        pool = file_pool(watcher, cfg.backend)[1]
        if args.backend:
            raise UsageError("--resources names the pool's members: give them in the file, not with --backend")
    else:
        given = args.backend or args.pool or args.backend_opt
        pool = backend_pool(args, args.backend or old[0][0], always=True, check=False) if given else None
    placement = _placement(runner, cfg.backend, pool or old, watcher)
    why = []
    if policy.staleness and policy != saved:
        why.append(f"staleness {policy.staleness} lets actors use older parameters, as timing has it")
    if policy.compression.kind != "none":
        why.append(f"compression {policy.compression.kind} is not exact")
    if policy.name == "multi-learner" and policy.learners > 1 and policy != saved and cfg.dtype != "float64":
        why.append("multi-learner sums gradients in another order, which float32 roundoff shows")
    kinds = {_kind(m) for m in (pool or old)}
    if not kinds <= {_kind(m) for m in old}:
        why.append(f"the pool's backends ({', '.join(sorted(k[0] for k in kinds))}) are not the run's kind")
    elif pool is not None and placement.in_process != (len(old) == 1 and differentiates(placement.members[0])):
        why.append("the policy's circuit runs as jobs where it ran in process, or the other way round")
    warning = None if not why else ("hqflow: --resume: results will differ from an undisturbed run from here on: "
                                    + "; ".join(why))
    return policy, placement, warning


def _kind(spec) -> tuple:
    """What a pool member computes with: its backend and the simulator it wraps (emulated QPUs)."""
    name, options = spec
    return name, json.dumps(options.get("wrapped"), sort_keys=True), \
        json.dumps(options.get("wrapped_options"), sort_keys=True)


def _kept(runner, run_dir: str) -> str:
    """What a stopped run keeps: its last completed update, or nothing yet (a resume starts it afresh)."""
    try:
        update = runner.load_run(run_dir)[1]["update"]
    except (ValueError, TypeError):  # no checkpoint (None), or none readable
        update = -1
    return (f"the last completed update ({update + 1}) is checkpointed" if update >= 0 else
            "no update had completed, so none is checkpointed and a resume starts from the beginning")


def _caused_by(exc: BaseException, kind: type) -> bool:
    """Whether ``kind`` is in ``exc``'s chain of causes (a fragment's error wraps its job's)."""
    seen = set()
    while exc is not None and id(exc) not in seen and not isinstance(exc, kind):
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return isinstance(exc, kind)


def planned_lane(args, runner, algo, cfg, pool, watcher, distribution):
    """``(distribution, placement, scheduler options, config, plan)``: the members made once (``_placement``); with
    ``--plan auto`` as ``workloads.rl.planned`` plans it, the config first taking ``workloads.rl.frugal``'s settings within
    the bounds given to ``--objective cost``. Without ``--plan``: as given (its flags refused)."""
    from .cost import frugal_bounds

    bounds = frugal_bounds(args)
    if args.plan and (distribution != "auto" or args.staleness is not None):
        raise UsageError("--plan auto chooses the distribution: give --max-staleness, not --distribution or "
                         "--staleness")
    if args.plan and watcher is not None:
        raise UsageError("--plan auto chooses the pool's members and --resources names them: give one of the two")
    saved = saved_profile(args.profile)  # (a --profile that cannot be saved: refused before any member is made)
    placement = _placement(runner, cfg.backend, pool, watcher)
    if not args.plan:
        return distribution, placement, {}, cfg, None
    from hqflow.workloads.rl.frugal import policy_config
    from hqflow.workloads.rl.planned import plan_training

    with _closing(placement, ValueError):  # --shot-budget, --ray-address and the target's shots and prices:
        _scheduler_options(args, _Run(algo, cfg, "", "pipelined", placement))  # refused before a plan is printed
        cfg = cfg if bounds is None else policy_config(runner.algorithm(algo), cfg, placement.members[0], bounds)
    with _closing(placement, (KeyError, ValueError), lambda exc: f"cannot plan the training: {str(exc).strip(QUOTES)}"):
        chosen, distribution, options, placement = plan_training(
            algo, cfg, placement, saved, save=lambda prof: save_profile(prof, args.profile),
            max_staleness=args.max_staleness, objective=args.objective or "time", budget=args.budget)
    print(f"{chosen}\n", file=sys.stderr)
    return distribution, placement, options, cfg, chosen


@dataclasses.dataclass
class _Run:
    """A run ``hqflow train`` starts or resumes, resolved from the command line."""

    algo: str
    cfg: object
    run_dir: str
    distribution: object  # a policy, or "auto"
    placement: object  # runner.Placement: the backend's members, made once
    watcher: object = None
    scheduler: dict = dataclasses.field(default_factory=dict)
    plan: object = None  # --plan auto's


def cmd_train(args) -> int:
    from hqflow.workloads.rl import runner

    if (args.max_staleness is not None or args.profile) and not args.plan:
        raise UsageError("--max-staleness and --profile go with --plan auto")
    if args.dry_run:
        return _dry_run(args, runner)
    run = _resumed_run(args, runner) if args.resume else _new_run(args, runner)
    if run is None:
        return 0
    try:
        _scheduler_options(args, run)
        out = _train(args, run, runner)
    finally:
        run.placement.close()
    if args.plan:
        fold(args.profile, out["spans"], run.plan)  # every planned run updates the profile the next one plans with
    returns = out["returns"]
    figures = {"algo": run.algo, "env": run.cfg.env, "seed": run.cfg.seed, "distribution": out["distribution"],
               "episodes": len(returns), "episodes_to_solve": out["episodes_to_solve"],
               "mean_return_last_10": sum(returns[-10:]) / max(len(returns[-10:]), 1),
               "seconds": round(out["seconds"], 3), "env_steps": out["env_steps"],
               "env_steps_per_s": round(out["env_steps_per_s"], 1),
               "circuit_evals_per_s": round(out["circuit_evals_per_s"], 1), "run_dir": run.run_dir}
    figures.update(spend_figures(out))
    if not args.json and figures["episodes_to_solve"] is None:
        figures["episodes_to_solve"] = f"not within {run.cfg.max_episodes} episodes"
    show_figures(args, figures, 22)
    return 0


def _planning(args) -> bool:
    """Whether --objective or its bounds were given (they go with --plan auto on a new run)."""
    return bool(args.objective or args.gradients or args.shots_range or args.spsa_samples_range)


def _dry_run(args, runner) -> int:
    """--dry-run: ``--dry-run-updates`` updates on ``dry-run:<backend>`` in a scratch directory, and what the whole
    run would use (nothing is submitted; no run directory is kept)."""
    from hqflow.workloads.rl.frugal import projection

    from .cost import dry_run_tally

    if args.resume or args.plan or args.resources or args.run_dir or _planning(args):
        raise UsageError("--dry-run keeps no run: give ENV and its settings, not --resume, --plan (or --objective "
                         "and its bounds), --resources or --run-dir")
    if not args.env:
        raise UsageError("--dry-run needs an environment (cartpole, acrobot, a gymnasium id, ...)")
    mod, cfg = _config(args, runner)
    tally, dry = dry_run_tally(), f"dry-run:{cfg.backend}"
    small = dataclasses.replace(cfg, backend=dry, stop_when_solved=False,
                                max_episodes=args.dry_run_updates * mod.episodes_per_update(cfg))
    placement = _placement(runner, dry, backend_pool(args, name=dry, check=False))
    with _closing(placement):
        check_target([m.inner for m in placement.members], mod.name, cfg, dry_run=True)  # the targets it prices
    with tempfile.TemporaryDirectory() as scratch:
        try:
            out = runner.train(mod.name, small, _distribution(args), run_dir=scratch, tensorboard=False,
                               backends=placement)
        except (ValueError, BackendError) as exc:
            raise UsageError(f"--dry-run: {exc}") from None
        finally:
            placement.close()
    figures = projection(out, cfg, cfg.spec.max_episode_steps(), runner.circuits_per_env_step(mod.name, cfg)[0])
    if not args.json:
        print(tally.table())
    show_figures(args, figures, 36)
    return 0


def _resumed_run(args, runner) -> _Run | None:
    """``--resume RUN_DIR``: the run's own algorithm and config, the pool and distribution given (None: done)."""
    if args.plan:
        raise UsageError("--plan auto plans a new run; to change a resumed run's pool or distribution, give them")
    if (args.env or args.env_module or args.algo or args.seed is not None or args.set or args.episodes or args.run_dir
            or cost_overrides(args) or _planning(args) or args.init_from):
        raise UsageError("--resume continues the run's own algorithm and directory: ENV, --env-module, --algo, "
                         "--seed, --set, --episodes, --run-dir, --init-from, --shots, --gradient, --spsa-* and "
                         "--objective's bounds cannot change (the pool, the distribution, --resources and the budgets may)")
    importable_cwd()  # a MODULE:ID environment from the current directory, as a new run finds it
    try:
        meta, ckpt = runner.load_run(args.resume)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    algo, run_dir = meta["algo"], args.resume
    cfg = runner.algorithm(algo).Config(**meta["config"])
    watcher = watching(args)
    distribution, placement, warning = _resumed(args, meta, cfg, runner, watcher)
    run = _Run(algo, cfg, run_dir, distribution, placement, watcher)
    if ckpt is None:  # stopped before its first checkpoint: it starts again
        print(one_line(f"hqflow: {run_dir} has no checkpoint yet: training it from the start"), file=sys.stderr)
        return run
    with _closing(placement, runner.RunDirError):
        runner.check_resume(run_dir, algo, cfg, ckpt)
    if runner.complete(algo, cfg, ckpt):
        placement.close()
        print(one_line(f"hqflow: {run_dir} is complete ({ckpt['update'] + 1} updates, {len(ckpt.get('returns', []))} "
                       f"episodes{', solved' if ckpt.get('solved_at') else ''}): nothing to resume; "
                       f"hqflow eval {run_dir} evaluates it"), file=sys.stderr)
        return None
    if warning:
        print(warning, file=sys.stderr)
    return run


def _new_run(args, runner) -> _Run:
    """ENV with --algo, --set, the pool and the distribution: a new run and its run directory."""
    if not args.env:
        raise UsageError("give an environment (cartpole, acrobot, frozenlake, a gymnasium id such as CartPole-v1, "
                         "or MODULE:ID) or --resume RUN_DIR")
    if args.env_module:
        args.env = with_module(args.env, args.env_module)
    if ":" in args.env:
        importable_cwd()
    watcher = watching(args)
    if watcher is not None:
        args.backend, pool = file_pool(watcher, args.backend)
    algo, cfg = args.algo or "reinforce", _config(args, runner)[1]
    if args.init_from is not None:  # (before a --plan auto calibration spends)
        try:
            runner.init_params(args.init_from, algo, cfg)
        except ValueError as exc:
            raise UsageError(f"--init-from: {exc}") from None
    if watcher is None:
        pool = backend_pool(args, check=False)
    distribution = _distribution(args)
    in_process(distribution, watcher)
    run_dir = args.run_dir
    if run_dir is None:  # runs/ALGO-ENV-seedN, then -2, -3, ... : never over an earlier run
        base = os.path.join("runs", f"{algo}-{cfg.env.replace('/', '-')}-seed{cfg.seed}")  # a namespace/ID too
        names = itertools.chain([base], (f"{base}-{k}" for k in itertools.count(2)))
        run_dir = next(d for d in names if not os.path.exists(d))
    if os.path.exists(os.path.join(run_dir, "config.json")):  # (before a --plan auto calibration spends)
        raise UsageError(f"{run_dir} already holds a run; use --resume {run_dir} (which also starts a run "
                         "stopped before its first checkpoint) or another --run-dir")
    distribution, placement, scheduler, cfg, plan = planned_lane(args, runner, algo, cfg, pool, watcher, distribution)
    with _closing(placement):
        make_folder(run_dir)
    return _Run(algo, cfg, run_dir, distribution, placement, watcher, scheduler, plan)


def _distribution(args, saved=None):
    """``--distribution`` with ``--staleness``, ``--learners`` and ``--compression``: a new run's (``"auto"``: the
    runner's), or a resumed run's (its ``saved`` policy, or the one given)."""
    from hqflow.engine.distribution import get_distribution

    options = {k: getattr(args, k) for k in ("staleness", "learners", "compression") if getattr(args, k) is not None}
    name = getattr(saved, "name", "auto") if args.distribution == "auto" else args.distribution
    whose = f" (the run's is {saved.name})" if saved else ""
    for flag, key in (("--learners", "learners"), ("--compression", "compression")):
        if key in options and name != "multi-learner":
            raise UsageError(f"{flag} needs --distribution multi-learner{whose}")
    if "staleness" in options and name in ("auto", "sync"):
        raise UsageError(f"--staleness needs --distribution pipelined, ray-actors or multi-learner{whose}")
    policy = saved if saved is not None and name == saved.name else name
    try:
        return "auto" if name == "auto" else get_distribution(policy, **options)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _scheduler_options(args, run: _Run) -> None:
    """--budget and --ray-address, beside what --plan auto chose; what the backend refuses or cannot price."""
    check_target(run.placement.members, run.algo, run.cfg, args.budget)
    if args.budget is not None:
        run.scheduler.setdefault("budget", args.budget)  # (--plan auto: the same; the ledger has the calibration)
    if args.shot_budget is not None:
        if run.placement.in_process:
            raise UsageError(f"--shot-budget counts the shots of a job backend's jobs (emulated-qpu, azure:TARGET, a "
                             f"pool): {run.cfg.backend!r} runs in process")
        run.scheduler["shot_budget"] = args.shot_budget
    if args.ray_address is not None:
        if getattr(run.distribution, "name", run.distribution) not in ("ray-actors", "multi-learner"):
            raise UsageError("--ray-address needs --distribution ray-actors or multi-learner (the other "
                             "distributions run in this process)")
        run.scheduler["ray_address"] = args.ray_address


def _train(args, run: _Run, runner) -> dict:
    """runner.train with a progress bar; a failure says what the run directory keeps and how to resume."""
    from .progress import Progress

    cfg, run_dir = run.cfg, run.run_dir
    if not args.resume and not run.placement.in_process:  # jobs: say what a step costs
        say_step_cost(run.algo, cfg, *runner.circuits_per_env_step(run.algo, cfg))
    with Progress(cfg.max_episodes, f"{run.algo} {cfg.env}") as bar, \
            run.watcher.sighup() if run.watcher is not None else contextlib.nullcontext():
        if run.watcher is not None:
            run.watcher.say = bar.write  # a line above the progress bar
        try:
            return runner.train(run.algo, cfg, run.distribution, run_dir=run_dir, resume=bool(args.resume),
                                checkpoint_every=args.checkpoint_every,
                                progress=cost_report(bar, runner.algorithm(run.algo).updates(cfg)),
                                tensorboard=args.tensorboard, resources=run.watcher, backends=run.placement,
                                init_from=args.init_from, **run.scheduler)
        except RunFailed as exc:
            what = ("raise --shot-budget" if _caused_by(exc, ShotBudgetExceeded) else
                    "raise --budget" if _caused_by(exc, BudgetExceeded) else
                    "check the credentials and the endpoint" if _caused_by(exc, BackendAccessError) else
                    "fix the backend")
            raise RunStopped(f"training stopped: {exc} ({_kept(runner, run_dir)}: {what}, then hqflow train --resume "
                             f"{run_dir})") from None
        except KeyboardInterrupt:
            raise KeyboardInterrupt(f"interrupted; {_kept(runner, run_dir)}: continue with hqflow train --resume "
                                    f"{run_dir}") from None
        except runner.RunDirError as exc:  # a damaged run directory; the message names the file
            raise UsageError(str(exc)) from None
        except OSError as exc:  # a run directory that cannot be written
            raise UsageError(f"cannot write the run directory {run_dir}: {exc.strerror} ({exc.filename})") from None
