"""A training as the cost model plans it (``hqflow train --plan auto``): ``plan_training`` calibrates the
default distribution on the run's own members (or takes a saved profile), plans with ``hqflow.planning.planner``
within what a budget leaves, and gives the distribution, scheduler options and members to train with.
"""
from __future__ import annotations

import dataclasses
import sys

import hqflow as hq
from hqflow.engine.distribution import get_distribution
from hqflow.planning.planner import apply, calibration, with_staleness
from hqflow.workloads.rl import runner


def plan_training(algo: str, cfg, placement, profile=None, *, save=lambda profile: None, max_staleness=None,
                  calibrate_updates: int = 3, objective: str = "time", budget: float | None = None,
                  say=lambda text: print(f"hqflow: {text}", file=sys.stderr)):
    """``(plan, distribution, scheduler options, placement)``, planned from ``profile``, else from
    ``calibrate_updates`` updates of the default distribution on ``placement`` (``runner.Placement``, made once;
    the one returned holds the plan's members, the others closed), whose profile goes to ``save``. The planner
    searches staleness up to ``max_staleness`` (default: the default distribution's), the actor slots, prefetch,
    rows per job and the members for the shortest run (``objective="cost"``: the cheapest, a step's rows in one
    job; ``cfg`` holds ``frugal``'s choice) within what ``budget`` leaves after the calibration (the run's
    budget, in the options, with ``paid_before``: what the calibration paid, where the run's ledger starts). The
    calibration may spend its updates' share of ``budget``: past it, at its rate, the run would not fit. A
    ``ValueError`` where no plan fits; ``say`` reports."""
    run = runner.setup(algo, cfg, placement)
    mod, default, resolved, graph, updates = run.algo, run.default_distribution(), run.cfg, run.graph(0), run.updates
    spent = [0.0, None, 0, 0]  # the calibration's spend, its currency, its updates, its shots
    if profile is None:
        steps = max(3, calibrate_updates)
        say(f"calibrating: {steps} updates of {algo} on every backend")

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
                raise ValueError(f"--budget {budget:,.2f} {unit} does not fit the run: the calibration reached its "
                                 f"share, {share:,.2f} ({done} of its and the run's {done + updates} updates), "
                                 f"after spending {paid:,.2f}; raise --budget, or plan from a saved --profile") \
                    from None
            spent[:] = spent[0] + (out["spend"] or 0.0), out["currency"], done, spent[3] + out["paid"]["shots"]
            return out["spans"]

        profile = calibration(calibrate, steps, with_staleness(graph, default.staleness),
                              default.scheduler_config(), rounds=1)  # its updates are paid for: one round
        save(profile)
    left = None if budget is None else budget - spent[0]
    if spent[1] is not None:
        say(f"the calibration spent {spent[0]:,.2f} {spent[1]} (list price)" + (
            "" if budget is None else f"; the run may spend the {left:,.2f} left of --budget {budget:,.2f}"))
    bound = default.staleness if max_staleness is None else max_staleness
    chosen = hq.plan(graph, updates, profile, objective=objective, budget=left, max_staleness=bound,
                     rows_per_job=(None,) if objective == "cost" else None)
    keep = apply(chosen, graph, {placement.name: list(range(len(placement.members)))})[1][placement.name]
    runner.Placement(placement.name, *([x for k, x in enumerate(p) if k not in keep] for p in (
        placement.specs, placement.members))).close()  # the members the plan left out
    actors = chosen.config.cpu_workers
    distribution = get_distribution("sync") if chosen.staleness == 0 and actors == 1 and placement.in_process \
        else get_distribution("pipelined", staleness=chosen.staleness, actors=actors)
    options = {"prefetch": chosen.config.prefetch, "rows_per_job": chosen.config.rows_per_job, "budget": budget,
               "paid_before": (spent[0], spent[3], spent[1])}  # the run's ledger counts the calibration's
    return chosen, distribution, options, runner.Placement(placement.name, *(tuple(p[k] for k in keep) for p in (
        placement.specs, placement.members)))
