"""``hqflow plan``: how the cost model would run a workload, and ``hqflow run --plan auto``.

    hqflow plan classifier --backend emulated-qpu --pool 3 --objective cost --budget 20 --measure
    hqflow plan runs/clf                              # a run directory of hqflow run --run-dir: its spans
    hqflow run classifier ... --plan auto --profile prof.json   # plan, run, and fold the run into prof.json

The profile comes from a run directory's ``spans.json``, else ``--profile FILE``, else calibration runs
of ``--calibrate`` steps on every backend of the pool, in rounds until two agree (``planner.calibration``);
calibrations and runs are merged into FILE.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys

from hqflow.ir.text import shown

from .pool import UsageError, backend_pool, make_member

QUOTES = "'\""  # around a KeyError's message


def _spans(result: dict):
    from hqflow.trace import Span

    return [s if isinstance(s, Span) else Span.from_dict(s) for s in result.get("spans", [])]


def _target(args):
    """``(workload module, its name, config, spans of a run directory or None)``."""
    from hqflow.workloads import WORKLOADS, get_workload

    from hqflow.trace import TraceError, load_spans

    folder = name = args.workload  # a workload's name (argparse's type checked it), or a run directory
    spans, saved = None, {}
    if os.path.isdir(folder):
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
    if spans is not None and args.backend not in (None, getattr(cfg, "backend", None)):
        raise UsageError(f"{folder} ran on {shown(getattr(cfg, 'backend', None))}: its spans cannot plan "
                         f"{shown(args.backend)}; plan the workload by its name, {name}, for another backend")
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
    from hqflow.planning.costmodel import calibrate as fit
    from hqflow.planning.planner import calibration, rows_of
    from hqflow.planning.profile import profile

    graph = module.build_graph(cfg)
    prof = saved = saved_profile(profile_path)
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
            save_profile(prof, profile_path)
        return hq.plan(graph, cfg.steps, prof, objective=objective, budget=budget, max_staleness=max_staleness,
                       rows=rows_of(graph, prof))
    except (KeyError, ValueError) as exc:
        raise UsageError(str(exc).strip(QUOTES)) from None


def saved_profile(path: str | None):
    """The profile saved at ``path``, or None where there is none (yet). That one can be saved there,
    ``--profile``'s argparse type (``cli_pool.output``) checked before any calibration."""
    from hqflow.planning.profile import Profile, ProfileError

    if not path or not os.path.exists(path):
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
    from hqflow.planning.planner import renamed
    from hqflow.planning.profile import profile

    saved = saved_profile(profile_path)
    fresh = profile(spans if plan is None else renamed(plan, spans), saved)
    save_profile(fresh if saved is None else saved.merged(fresh), profile_path)


def save_profile(prof, path: str | None) -> None:
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
            from hqflow.trace import makespan

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
