"""``hqflow plan``: how the cost model would run a workload, and ``hqflow run --plan auto``.

    hqflow plan classifier --backend emulated-qpu --pool 3 --backend-opt per_circuit=0.002
    hqflow plan classifier ... --objective cost --budget 20 --max-staleness 1
    hqflow plan classifier ... --measure             # then run the plan: predicted against measured
    hqflow plan runs/clf                              # a run directory of hqflow run --run-dir: its spans
    hqflow run classifier ... --plan auto --profile prof.json   # plan, run, and fold the run into prof.json

The profile comes from, in this order: a run directory's ``spans.json``; ``--profile FILE`` (a
profile saved before); else a calibration run of ``--calibrate`` steps with every backend of the
pool. With ``--profile FILE`` the calibration (and ``hqflow run``'s own spans) are merged into
FILE, so every run updates the profile the next plan uses.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys

from .cli_errors import UsageError


def _spans(result: dict):
    from .trace import Span

    return [s if isinstance(s, Span) else Span.from_dict(s) for s in result.get("spans", [])]


def _target(args):
    """``(workload module, its name, config, spans of a run directory or None)``."""
    from hqflow.workloads import WORKLOADS, get_workload

    from .trace import TraceError, load_spans

    spans = None
    if os.path.isdir(args.workload):
        folder = args.workload
        try:
            spans, meta = load_spans(os.path.join(folder, "spans.json"))
            with open(os.path.join(folder, "config.json")) as fh:
                saved = json.load(fh)
        except (OSError, TraceError, ValueError) as exc:
            raise UsageError(f"{folder}: not a run directory of hqflow run --run-dir ({exc})") from None
        name = meta.get("workload")
        if name not in WORKLOADS:
            raise UsageError(f"{folder}: its spans name no workload hqflow plan knows ({name!r})")
        module = get_workload(name)
        try:
            cfg = module.Config(**saved)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"{folder}/config.json does not fit workload {name!r}: {exc}") from None
    else:
        name = args.workload
        try:
            module = get_workload(name)
        except KeyError as exc:
            raise UsageError(f"{str(exc).strip(chr(39) + chr(34))}, or a run directory") from None
        cfg = module.Config()
    overrides = {k: v for k, v in (("steps", args.steps), ("seed", args.seed), ("backend", args.backend))
                 if v is not None}
    unknown = [k for k in overrides if not hasattr(cfg, k)]
    if unknown:
        raise UsageError(f"workload {name!r} has no option {unknown[0]!r}")
    return module, name, dataclasses.replace(cfg, **overrides), spans


def make_plan(args, module, cfg, backends, spans=None, say=print):
    """The plan for ``cfg`` (see the module docstring)."""
    import hqflow as hq
    from hqflow.costmodel import calibrate
    from hqflow.planner import calibration, rows_of
    from hqflow.profile import Profile, ProfileError, profile

    graph = module.build_graph(cfg)
    saved = None
    if args.profile and os.path.exists(args.profile):
        try:
            saved = Profile.load(args.profile)
        except ProfileError as exc:
            raise UsageError(str(exc)) from None
    prof = None
    if spans is None and (saved is None or args.calibrate_given):
        say(f"hqflow: calibrating: {args.calibrate} steps of {module.__name__.rsplit('.', 1)[1]} on every backend")
        prof = calibration(lambda n, cut: _spans(module.run(dataclasses.replace(cfg, steps=n), backends=backends,
                                                            rows_per_job=cut)), args.calibrate, graph)
    elif spans:
        measured = profile(spans)
        prof = calibrate(graph, spans, measured, hq.SchedulerConfig(), rows=rows_of(graph, measured))
    if saved is not None:
        prof = saved if prof is None else saved.merged(prof)
    if prof is None:
        raise UsageError("nothing to plan from: no calibration run, run directory or --profile")
    if args.profile and prof is not saved:
        prof.save(args.profile)
    rows = rows_of(graph, prof)
    try:
        chosen = hq.plan(graph, cfg.steps, prof, objective=args.objective, budget=args.budget,
                         max_staleness=args.max_staleness, rows=rows)
    except (KeyError, ValueError) as exc:
        raise UsageError(str(exc).strip("'\"")) from None
    return chosen


def fold(args, spans) -> None:
    """Merge a finished run's spans into ``--profile FILE`` (every run updates the profile)."""
    if not args.profile or not spans:
        return
    from hqflow.profile import Profile, profile

    fresh = profile(spans)
    prof = Profile.load(args.profile).merged(fresh) if os.path.exists(args.profile) else fresh
    prof.save(args.profile)


def cmd_plan(args) -> int:
    from .cli_pool import backend_pool as _backend_pool

    module, name, cfg, spans = _target(args)
    if not hasattr(cfg, "backend"):
        raise UsageError(f"workload {name!r} runs no quantum jobs to plan")
    pool = _backend_pool(args)
    backends = None if pool is None else {cfg.backend: pool}
    args.calibrate_given = args.calibrate is not None
    args.calibrate = args.calibrate or 5
    chosen = make_plan(args, module, cfg, backends, spans, say=lambda m: print(m, file=sys.stderr))
    figures = {"workload": name, "steps": cfg.steps, "staleness": chosen.staleness,
               "prefetch": chosen.config.prefetch, "rows_per_job": chosen.config.rows_per_job,
               "cpu_workers": chosen.config.cpu_workers, "members": {pool: [str(m) for m in members] for pool, members in chosen.members},
               "predicted_s": round(chosen.prediction.makespan, 4), "predicted_spend": chosen.prediction.spend}
    if not args.json:
        print(f"plan for {name}, {cfg.steps} steps\n{chosen}")
    if args.measure:
        result = module.run(cfg, backends=backends, plan=chosen)
        from .trace import makespan

        spans = _spans(result)
        measured = makespan(spans)
        fold(args, spans)
        figures.update(measured_s=round(measured, 4),
                       prediction_error=round(abs(chosen.prediction.makespan - measured) / measured, 4))
        if not args.json:
            print(f"measured makespan   {measured:.3f} s (predicted {chosen.prediction.makespan:.3f} s, "
                  f"off by {figures['prediction_error']:.0%})")
    if args.json:
        print(json.dumps(figures), file=args.json_out)
    return 0


def plan_training(algo: str, cfg, backends, *, profile_path: str | None = None, max_staleness: int | None = None,
                  calibrate_updates: int = 3, say=print):
    """How ``hqflow train --plan auto`` runs: ``(plan, distribution, scheduler options, backends)``.

    The profile is ``profile_path``'s where it exists, else that of a calibration: ``calibrate_updates``
    updates of the default distribution on every backend, in no run directory (and, where all jobs had
    the same rows, as many again with the rows cut in two). The planner searches the actors' staleness
    up to ``max_staleness`` (default: the default distribution's), the actor slots, prefetch, rows per
    job and the pool's members; the rollouts' and the learner's own jobs are modelled in rounds
    (``hqflow.costmodel``)."""
    import hqflow as hq
    from hqflow.distribution import get_distribution
    from hqflow.planner import apply, calibration, with_staleness
    from hqflow.profile import Profile, ProfileError
    from hqflow.workloads.rl import runner

    mod = runner.algorithm(algo)
    in_process, devices = runner.backend_facts(cfg.backend, backends)
    default = runner.default_distribution(in_process)
    bound = default.staleness if max_staleness is None else max_staleness
    resolved = mod.resolve(cfg, in_process, devices)
    graph = runner.build_graph(algo, resolved, 0, () if in_process else (cfg.backend,))
    updates = -(-cfg.max_episodes // mod.episodes_per_update(resolved))
    prof = None
    if profile_path and os.path.exists(profile_path):
        try:
            prof = Profile.load(profile_path)
        except ProfileError as exc:
            raise UsageError(str(exc)) from None
    if prof is None:
        say(f"hqflow: calibrating: {calibrate_updates} updates of {algo} on every backend")

        def run(n, cut):
            small = dataclasses.replace(cfg, max_episodes=n * mod.episodes_per_update(resolved), stop_when_solved=False)
            return runner.train(algo, small, default, backends=backends, tensorboard=False,
                                rows_per_job=cut)["spans"]

        prof = calibration(run, max(3, calibrate_updates), with_staleness(graph, default.staleness),
                           default.scheduler_config())
        if profile_path:
            prof.save(profile_path)
    try:
        chosen = hq.plan(graph, updates, prof, max_staleness=bound)
    except (KeyError, ValueError) as exc:
        raise UsageError(f"cannot plan the training: {str(exc).strip(chr(39) + chr(34))}") from None
    actors = chosen.config.cpu_workers
    distribution = get_distribution("sync") if chosen.staleness == 0 and actors == 1 and in_process \
        else get_distribution("pipelined", staleness=chosen.staleness, actors=actors)
    options = {"prefetch": chosen.config.prefetch, "rows_per_job": chosen.config.rows_per_job}
    _, planned, _ = apply(chosen, graph, backends)
    return chosen, distribution, options, planned or None


__all__ = ["cmd_plan", "fold", "make_plan", "plan_training"]
