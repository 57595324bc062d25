"""``hqflow eval RUN_DIR``: greedy episodes of a trained policy (``--dry-run``: the most they can cost)."""
from __future__ import annotations

import json
import sys

from hqflow.backends import BackendError
from hqflow.ir.text import one_line

from .pool import UsageError, backend_pool, importable_cwd
from hqflow.jobs.ledger import money


def cmd_eval(args) -> int:
    """``hqflow eval RUN_DIR``: greedy episodes of a trained policy."""
    from hqflow.workloads.rl.trained import evaluate, price_evaluation

    importable_cwd()  # a MODULE:ID environment from the current directory
    args.pool = None
    pool = backend_pool(args, name=args.backend or "compiled") if args.backend_opt else None
    backend = pool[0] if pool else args.backend
    try:
        if args.dry_run:
            figures = price_evaluation(args.run, args.episodes, backend, args.shots)
        else:
            figures = evaluate(args.run, episodes=args.episodes, seed=args.seed, backend=backend, record=args.record,
                               shots=args.shots, budget=args.budget, keep=True)
    except (ValueError, BackendError) as exc:
        raise UsageError(str(exc).splitlines()[0]) from None
    if args.dry_run:
        print(json.dumps(figures) if args.json else f"at most {money(figures['at_most'], figures['currency'])}: "
              f"{figures['episodes']} episodes side by side, up to {figures['max_steps']} steps of "
              f"{money(figures['per_step'], figures['currency'])} ({figures['circuits_per_step']} circuits) each",
              file=args.json_out if args.json else sys.stdout)
        return 0
    if args.json:
        print(json.dumps(figures), file=args.json_out)
    elif not figures["returns"]:
        print(f"{figures['env']}: no episode completed")
    else:
        print(f"{figures['env']}: mean return {figures['mean_return']:.2f} ± {figures['std_return']:.2f} over "
              f"{figures['episodes']} greedy episodes (seeds {args.seed}..{args.seed + args.episodes - 1})")
        if figures.get("videos"):
            print(f"wrote {len(figures['videos'])} videos to {one_line(args.record)}")
        if figures["usage"]["cost"]:
            print(f"spent {money(figures['usage']['cost'], figures['usage']['currency'])} list price on "
                  f"{figures['usage']['circuits']:,} circuits")
    if figures.get("stopped") == "budget":
        print(f"hqflow: evaluation stopped: its next step would pass --budget {args.budget:g}", file=sys.stderr)
        return 1
    return 0
