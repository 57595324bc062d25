"""``hqflow run``: a registered workload run, its figures printed (and written to --out and --run-dir); with
``--dry-run`` priced, with ``--plan auto`` planned first."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys

from .cost import cost_overrides, dry_run_tally
from .plan import _spans, fold, made, make_plan, with_options
from .pool import UsageError, backend_pool, show_figures
from hqflow.common.files import atomic_text
from hqflow.gradients import GradientMethod


def cmd_run(args) -> int:
    from hqflow.workloads import get_workload

    from .progress import Progress

    module = get_workload(args.workload)  # a known name: argparse's type checked it
    cfg = _run_config(args, module)
    tally = None
    if args.dry_run:  # cfg on dry-run:<its backend>, which prices every job into the tally and submits none
        if not hasattr(cfg, "backend"):
            raise UsageError(f"workload {args.workload!r} runs no quantum jobs to price")
        tally, cfg = dry_run_tally(), dataclasses.replace(cfg, backend=f"dry-run:{cfg.backend}")  # registered first
    with _run_options(args, module, cfg) as options, Progress(getattr(cfg, "steps", 1), args.workload) as bar:
        result = module.run(cfg, progress=bar, **options)
    if args.plan:
        fold(args.profile, _spans(result))
    if tally is not None:
        print(json.dumps(tally.figures()) if args.json else tally.table(), file=args.json_out)
        return 0
    figures = {k: v for k, v in result.items() if not isinstance(v, (list, dict))}
    show_figures(args, figures, 24)  # first: a file that cannot be written after all loses no figures
    try:
        if args.out:
            atomic_text(args.out, json.dumps(result, indent=2, default=float))
        if args.run_dir:
            _write_run_dir(args.run_dir, args.workload, cfg, result)
    except OSError as exc:
        raise UsageError(f"cannot write {exc.filename}: {exc.strerror}") from None
    return 0


def _run_config(args, module):
    """The workload's ``Config`` with --steps, --seed, --backend and the gradient and shots flags given."""
    cfg, given = with_options(args.workload, module.Config(), args), cost_overrides(args)
    flag = {field: "--" + field.replace("_", "-") for field in given}
    for field in given:
        if not hasattr(cfg, field):
            raise UsageError(f"workload {args.workload!r} has no setting for {flag[field]}")
    try:
        cfg = dataclasses.replace(cfg, **given)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"workload {args.workload!r}: {exc}") from None
    spsa_only = [flag[f] for f in ("spsa_samples", "spsa_epsilon") if f in given]
    if spsa_only and getattr(cfg, "gradient", None) != GradientMethod.SPSA:
        raise UsageError(f"{spsa_only[0]} goes with --gradient spsa")
    return cfg


@contextlib.contextmanager
def _run_options(args, module, cfg):
    """The keywords of the workload's ``run`` besides ``progress``: ``backends`` (--pool, --backend-opt)
    and ``plan`` (--plan auto, made and printed to stderr here, its members made once for it and the run)."""
    options = {}
    if (args.pool or args.backend_opt) and not hasattr(cfg, "backend"):
        raise UsageError(f"workload {args.workload!r} runs no quantum jobs for a pool")
    if (args.pool or args.backend_opt) and not args.plan:
        # under --dry-run every member is a dry-run:<backend> with the member's options: priced, never submitted
        options["backends"] = {cfg.backend: backend_pool(args, name=cfg.backend if args.dry_run else None)}
    given = [flag for flag, on in (("--profile", args.profile), ("--max-staleness", args.max_staleness is not None),
                                   ("--objective", args.objective)) if on]
    if given and not args.plan:
        raise UsageError(f"{given[0]} goes with --plan auto")
    if not args.plan:
        yield options
        return
    if args.dry_run or not hasattr(cfg, "backend"):
        raise UsageError("--plan auto needs a workload that runs quantum jobs, and no --dry-run")
    with made(args, cfg.backend) as options["backends"]:
        options["plan"] = make_plan(module, cfg, options["backends"], profile_path=args.profile,
                                    max_staleness=args.max_staleness, objective=args.objective or "time")
        print(f"{options['plan']}\n", file=sys.stderr)
        yield options


def _write_run_dir(folder: str, workload: str, cfg, result: dict) -> None:
    """config.json, result.json and, if the result carries ``"spans"`` (span dicts), spans.json."""
    from hqflow.trace import save_spans

    config = dataclasses.asdict(cfg)
    atomic_text(os.path.join(folder, "config.json"), json.dumps(config, indent=2, default=float))
    rest = {k: v for k, v in result.items() if k != "spans"}
    atomic_text(os.path.join(folder, "result.json"), json.dumps(rest, indent=2, default=float))
    if "spans" in result:
        save_spans(os.path.join(folder, "spans.json"), _spans(result), {"workload": workload, "config": config})
