"""``hqflow plan``: how the cost model would run a workload, and ``hqflow run --plan auto``.

    hqflow plan classifier --backend emulated-qpu --pool 3 --objective cost --budget 20 --measure
    hqflow plan runs/clf                              # a run directory of hqflow run --run-dir: its spans
    hqflow run classifier ... --plan auto --profile prof.json   # plan, run, and fold the run into prof.json

The profile comes from a run directory's ``spans.json``, else ``--profile FILE``, else a calibration run
of ``--calibrate`` steps on every backend of the pool; calibrations and runs are merged into FILE.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys

from hqflow.ir.text import shown

from .cli_pool import UsageError, backend_pool, make_member

QUOTES = "'\""  # around a KeyError's message


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
        if args.backend not in (None, getattr(cfg, "backend", None)):
            raise UsageError(f"{folder} ran on {shown(getattr(cfg, 'backend', None))}: its spans cannot plan "
                             f"{shown(args.backend)}; plan the workload by its name, {name}, for another backend")
    else:
        name = args.workload
        try:
            module = get_workload(name)
        except KeyError as exc:
            raise UsageError(f"{str(exc).strip(QUOTES)}, or a run directory") from None
        cfg = module.Config()
    return module, name, with_options(name, cfg, args), spans


def with_options(name: str, cfg, args):
    """Workload ``name``'s ``cfg`` with ``--steps``, ``--seed`` and ``--backend`` where given."""
    overrides = {k: getattr(args, k) for k in ("steps", "seed", "backend") if getattr(args, k) is not None}
    unknown = [k for k in overrides if not hasattr(cfg, k)]
    if unknown:
        raise UsageError(f"workload {name!r} has no option {unknown[0]!r}")
    return dataclasses.replace(cfg, **overrides)


def make_plan(module, cfg, backends, spans=None, *, profile_path: str | None = None, calibrate: int | None = None,
              objective: str = "time", budget: float | None = None, max_staleness: int | None = None):
    """The plan for ``cfg``, from the profile the module docstring says. ``calibrate``: the calibration
    run's steps (default 5), given to calibrate beside a saved profile or a run directory's ``spans`` too."""
    import hqflow as hq
    from hqflow.costmodel import calibrate as fit
    from hqflow.planner import calibration, rows_of
    from hqflow.profile import profile

    graph = module.build_graph(cfg)
    prof = saved = _saved_profile(profile_path)
    try:
        if spans:  # a run directory's, beside a saved profile
            measured = profile(spans, saved)
            fitted = fit(graph, spans, measured, hq.SchedulerConfig(), rows=rows_of(graph, measured))
            prof = fitted if saved is None else saved.merged(fitted)
        if calibrate is not None or (spans is None and saved is None):  # beside them, where asked
            steps = calibrate or 5
            print(f"hqflow: calibrating: {steps} steps of {module.__name__.rsplit('.', 1)[1]} on every backend, in "
                  "rounds until two agree", file=sys.stderr)
            fitted = calibration(lambda n, cut: _spans(module.run(dataclasses.replace(cfg, steps=n),
                                                                  backends=backends, rows_per_job=cut)), steps, graph)
            prof = fitted if prof is None else prof.merged(fitted)
        if prof is None:
            raise UsageError("nothing to plan from: no calibration run, run directory or --profile")
        if prof is not saved:
            _save(prof, profile_path)
        return hq.plan(graph, cfg.steps, prof, objective=objective, budget=budget, max_staleness=max_staleness,
                       rows=rows_of(graph, prof))
    except (KeyError, ValueError) as exc:
        raise UsageError(str(exc).strip(QUOTES)) from None


def _saved_profile(path: str | None):
    """The profile saved at ``path``, or None where there is none (yet): then a usage error, before any
    calibration, unless a profile can be saved there (its nearest existing folder is a writable folder)."""
    from hqflow.profile import Profile, ProfileError

    if not path:
        return None
    if not os.path.exists(path):
        folder = os.path.dirname(os.path.abspath(path))
        while not os.path.exists(folder):
            folder = os.path.dirname(folder)
        if not (os.path.isdir(folder) and os.access(folder, os.W_OK)):
            raise UsageError(f"--profile {shown(path, 200)}: no profile can be saved there "
                             f"({shown(folder, 200)} is not a writable folder)")
        return None
    try:
        return Profile.load(path)
    except ProfileError as exc:
        raise UsageError(str(exc)) from None


def fold(profile_path: str | None, spans, plan=None) -> None:
    """Merge a finished run's spans into ``--profile FILE`` (every run updates the profile), each member's
    under its name in the pool the ``plan`` it ran was made for (``planner.renamed``)."""
    if not profile_path or not spans:
        return
    from hqflow.planner import renamed
    from hqflow.profile import profile

    saved = _saved_profile(profile_path)
    fresh = profile(spans if plan is None else renamed(plan, spans), saved)
    _save(fresh if saved is None else saved.merged(fresh), profile_path)


def _save(prof, path: str | None) -> None:
    """``prof`` saved to ``--profile path`` (None: nowhere); a file that cannot be written is a usage error."""
    try:
        if path:
            prof.save(path)
    except OSError as exc:
        raise UsageError(f"--profile {shown(path, 200)}: cannot write it: {exc.strerror}") from None


def cmd_plan(args) -> int:
    module, name, cfg, spans = _target(args)
    if not hasattr(cfg, "backend"):
        raise UsageError(f"workload {name!r} runs no quantum jobs to plan")
    with made(args, cfg.backend) as backends:
        chosen = make_plan(module, cfg, backends, spans, profile_path=args.profile, calibrate=args.calibrate,
                           objective=args.objective, budget=args.budget, max_staleness=args.max_staleness)
        figures = {"workload": name, "steps": cfg.steps, "staleness": chosen.staleness,
                   "prefetch": chosen.config.prefetch, "rows_per_job": chosen.config.rows_per_job,
                   "cpu_workers": chosen.config.cpu_workers,
                   "members": {p: list(map(str, m)) for p, m in chosen.members},
                   "predicted_s": round(chosen.prediction.makespan, 4), "predicted_spend": chosen.prediction.spend,
                   **{f"predicted_{k}": getattr(chosen.prediction, k) for k in ("service_jobs", "circuits", "shots")}}
        if not args.json:
            print(f"plan for {name}, {cfg.steps} steps\n{chosen}")
        if args.measure:
            from .trace import makespan

            spans = _spans(module.run(cfg, backends=backends, plan=chosen))
            measured = makespan(spans)
            fold(args.profile, spans)
            figures.update(measured_s=round(measured, 4),
                           prediction_error=round(abs(chosen.prediction.makespan - measured) / measured, 4))
            if not args.json:
                print(f"measured makespan   {measured:.3f} s (predicted {chosen.prediction.makespan:.3f} s, "
                      f"off by {figures['prediction_error']:.0%})")
    if args.json:
        print(json.dumps(figures), file=args.json_out)
    return 0


@contextlib.contextmanager
def made(args, name: str):
    """``{name: [member, ...]}`` of ``--backend`` (``name``), ``--pool`` and ``--backend-opt``: each member made
    once, for the calibration runs and the run, and closed after them."""
    with contextlib.ExitStack() as stack:
        yield {name: [stack.enter_context(contextlib.closing(make_member(spec, k)))
                      for k, spec in enumerate(backend_pool(args, name=name, always=True, check=False))]}


def plan_training(algo: str, cfg, placement, *, profile_path: str | None = None, max_staleness: int | None = None,
                  calibrate_updates: int = 3, objective: str = "time", budget: float | None = None):
    """How ``hqflow train --plan auto`` runs: ``(plan, distribution, scheduler options, placement)``, planned from
    ``profile_path``'s profile, else from ``calibrate_updates`` updates of the default distribution on ``placement``
    (``runner.Placement``, made once; the one returned holds the plan's members, the others closed). The planner
    searches staleness up to ``max_staleness`` (default: the default distribution's), the actor slots, prefetch,
    rows per job and the members for the shortest run (``objective="cost"``: the cheapest, a step's rows in one
    job; ``cfg`` holds ``hqflow.frugal``'s choice) within what ``budget`` leaves after the calibration (the run's
    budget, in the options). The calibration may spend its updates' share of ``budget``: past it, at its rate,
    the run would not fit."""
    import hqflow as hq
    from hqflow.distribution import get_distribution
    from hqflow.planner import apply, calibration, with_staleness
    from hqflow.workloads.rl import runner

    try:
        run = runner.setup(algo, cfg, placement)
        mod, default, resolved, graph, updates = run.algo, run.default_distribution(), run.cfg, run.graph(0), \
            run.updates
        prof, spent = _saved_profile(profile_path), [0.0, None, 0]  # the calibration's spend, currency, updates
        if prof is None:
            steps = max(3, calibrate_updates)
            print(f"hqflow: calibrating: {steps} updates of {algo} on every backend", file=sys.stderr)

            def calibrate(n, cut):
                small = dataclasses.replace(cfg, max_episodes=n * mod.episodes_per_update(resolved),
                                            stop_when_solved=False)
                done = spent[2] + n
                share = None if budget is None else budget * done / (done + updates)
                try:
                    out = runner.train(algo, small, default, backends=placement, tensorboard=False, rows_per_job=cut,
                                       budget=None if share is None else share - spent[0])
                except hq.RunFailed as exc:
                    if not exc.result.extra.get("refused_jobs"):
                        raise
                    paid, unit = spent[0] + exc.result.extra["spend"], exc.result.extra["currency"]
                    raise UsageError(f"--budget {budget:,.2f} {unit} does not fit the run: the calibration reached its "
                                     f"share, {share:,.2f} ({done} of its and the run's {done + updates} updates), "
                                     f"after spending {paid:,.2f}; raise --budget, or plan from a saved --profile") \
                        from None
                spent[:] = spent[0] + out["spend"], out["currency"], done
                return out["spans"]

            prof = calibration(calibrate, steps, with_staleness(graph, default.staleness), default.scheduler_config(),
                               rounds=1)  # its updates are paid for: one round
            _save(prof, profile_path)
        left = None if budget is None else budget - spent[0]
        if spent[1] is not None:
            print(f"hqflow: the calibration spent {spent[0]:,.2f} {spent[1]} (list price)" + (
                "" if budget is None else f"; the run may spend the {left:,.2f} left of --budget {budget:,.2f}"),
                file=sys.stderr)
        bound = default.staleness if max_staleness is None else max_staleness
        chosen = hq.plan(graph, updates, prof, objective=objective, budget=left, max_staleness=bound,
                         rows_per_job=(None,) if objective == "cost" else None)
        keep = apply(chosen, graph, {placement.name: list(range(len(placement.members)))})[1][placement.name]
    except BaseException as exc:
        placement.close()
        if isinstance(exc, (KeyError, ValueError)):
            raise UsageError(f"cannot plan the training: {str(exc).strip(QUOTES)}") from None
        raise
    runner.Placement(placement.name, *([x for k, x in enumerate(p) if k not in keep] for p in (
        placement.specs, placement.members))).close()  # the members the plan left out
    actors = chosen.config.cpu_workers
    distribution = get_distribution("sync") if chosen.staleness == 0 and actors == 1 and placement.in_process \
        else get_distribution("pipelined", staleness=chosen.staleness, actors=actors)
    options = {"prefetch": chosen.config.prefetch, "rows_per_job": chosen.config.rows_per_job, "budget": left}
    return chosen, distribution, options, runner.Placement(placement.name, *(tuple(p[k] for k in keep) for p in (
        placement.specs, placement.members)))
