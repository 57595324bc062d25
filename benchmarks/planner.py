"""The planner and elastic pools (issue 16): plans against exhaustive search, predictions against runs.

Part 1, plans. Scenarios of ``hqflow.workloads.synthetic``'s loop (an execute fragment of 8 rows on a
pool of emulated QPUs, then a learner of real torch work): C/Q from 0.1 to 10, pools of 1 to 3 QPUs
that differ in queue latency, per-job and per-row time, price and failure rate, with and without a
budget. The graph is built at staleness 0 (exact); the user allows the planner staleness up to 2.
Per scenario:

* a calibration run of ``--calibrate`` steps with every member, and half as many with the rows cut
  in two, give the profile (``hqflow.planning.planner.calibration``, ``hqflow.planning.profile.profile`` and
  ``hqflow.planning.costmodel.calibrate``);
* ``hq.plan`` picks staleness (0..2), prefetch (0, 1), rows per job (the 8 rows whole, or cut over
  the pool's QPUs) and the pool's members;
* every configuration of that same space is run (``--steps`` steps each) and the fastest one
  that kept the budget is the exhaustive best. The fastest of many noisy runs was also the luckiest,
  so the best configuration is then run afresh 3 times, and so are the plan and the default
  configuration (the graph as built, every member, ``SchedulerConfig()``): their median makespans
  count. The default at the user's staleness bound (2) is run once, for comparison.

``plan_vs_best``: the best's makespan over the plan's (geometric mean); ``prediction_error``: the
median of |predicted - measured| / measured of the plan's makespan; ``plan_vs_default``: the
default's makespan over the plan's, over the scenarios with a heterogeneous pool and no budget
(the default knows none); ``plan_vs_default_at_bound``: the same against the default at staleness 2;
``budget_respected``: scenarios with a budget whose plan's run spent within it, of them all.

Part 2, predictions (issue 23). Where the planner is used as a user would, its prediction must hold at
any staleness the user allows and with a short calibration. Per scenario, per staleness bound 0, 1 and 2,
and per calibration (``--calibrate`` steps, and 10): calibrate, plan, run the plan 3 times; the error is
|predicted - measured| / measured of the median run. Scenarios: synthetic loops over emulated QPUs whose
time is their device's; the README's classifier command (``hqflow plan classifier --steps 60 --backend
emulated-qpu --pool 3 --backend-opt per_job=0.005 ...``: two fast QPUs and a slow, queued one, which also
compute their results on this machine's CPUs); and, in the full run, the classifier on three QPUs whose
time is mostly that computation. ``prediction_error``: the median over every cell;
``prediction_error_worst``: the largest.

Part 3, where the default is poor: a pool with a slow member, a pool with a flaky member, a learner slower
than the QPU, and a row-heavy step over three QPUs. ``plan_vs_default_poor``: the default's median
makespan over the plan's (geometric mean over these scenarios; 3 runs each).

Part 4, elastic. ``--elastic-steps`` steps (200) at staleness 0 with exact values on two QPUs; after
a quarter of them one is removed, after half two are added (``hq.start``, ``RunHandle``). The final
weights against an undisturbed run; jobs lost or run twice (steps whose job did not run exactly
once); steps/s after the addition over the steady rate of a run that had those three QPUs from the
start.

    python benchmarks/planner.py [--quick]

The last line printed is one JSON object with the figures.
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import statistics
import sys
import threading
import time
from dataclasses import dataclass

import numpy as np
import torch

import hqflow as hq
from hqflow.backends.emulated import EmulatedQPU
from hqflow.planning.planner import calibration, rows_of, with_staleness
from hqflow.workloads import synthetic

PREFETCH = (0, 1)
BOUND = 2
"""the staleness the user allows the planner"""
REPEATS = 3
"""runs of the plan, of the exhaustive best and of the default, whose median makespan counts"""


@dataclass(frozen=True)
class Price:
    amount: float
    currency: str = "USD"
    jobs: int = 1
    shots: int = 0


class PricedQPU(EmulatedQPU):
    """An emulated QPU that prices its jobs: ``per_job`` + ``per_row`` dollars."""

    def __init__(self, price_job: float = 0.0, price_row: float = 0.0, **options):
        super().__init__(**options)
        self.price_job, self.price_row = price_job, price_row

    def estimate_cost(self, batch) -> Price:
        return Price(self.price_job + self.price_row * batch.size)


def qpus(members):
    """Fresh QPUs for one run: ``members`` are (name, queue, per_job, per_row, failure_rate, price per job)."""
    return [PricedQPU(price, 0.0, name=name, queue_wait=q, per_job=j, per_circuit=r, failure_rate=f, seed=k)
            for k, (name, q, j, r, f, price) in enumerate(members)]


FAST, SLOW = ("fast", 0.0, 0.004, 0.0004, 0.0, 1.0), ("slow", 0.0, 0.03, 0.001, 0.0, 0.2)
QUEUED, FLAKY = ("queued", 0.02, 0.004, 0.0004, 0.0, 0.5), ("flaky", 0.0, 0.004, 0.0004, 0.3, 0.3)
ROWS, ROWS2 = ("rows", 0.0, 0.002, 0.002, 0.0, 0.4), ("rows2", 0.0, 0.003, 0.0025, 0.0, 0.3)  # circuits dominate


def scenarios(quick: bool) -> list[dict]:
    """(C/Q, pool members as (name, queue s, per job s, per row s, failure rate, price per job), budget)."""
    if quick:
        return [{"ratio": 0.3, "pool": [ROWS, ROWS2], "budget": None},
                {"ratio": 0.1, "pool": [FAST, SLOW], "budget": "tight"}]
    out = []
    for ratio in (0.1, 1.0, 10.0):
        for pool in ([FAST], [FAST, SLOW], [FAST, QUEUED], [ROWS, ROWS2], [FAST, FLAKY, SLOW]):
            out.append({"ratio": ratio, "pool": pool, "budget": None})
    for ratio in (0.1, 1.0):
        out.append({"ratio": ratio, "pool": [FAST, SLOW], "budget": "tight"})
        out.append({"ratio": ratio, "pool": [FAST, QUEUED, FLAKY], "budget": "tight"})
    return out


def cuts(members) -> list:
    """The rows-per-job values the planner tries for 8 rows over this pool (``planner._cuts``)."""
    return [None] + [-(-8 // k) for k in range(2, min(8, len(members)) + 1)]


def makespan(res) -> float:
    return max(s.end for s in res.spans) - min(s.start for s in res.spans)


def spend(res) -> float:
    return sum(s.cost or 0.0 for s in res.spans if s.kind == "execute" and s.outcome == "ok")


def names_of(members) -> list[str]:
    """The members' names in a profile: ``qpu:NAME``, and ``#k`` after it in a pool of several."""
    return [f"qpu:{m[0]}#{k}" if len(members) > 1 else f"qpu:{m[0]}" for k, m in enumerate(members)]


def run_config(graph, cfg, members, steps, staleness, prefetch, chosen=None, budget=None, rows_per_job=None):
    """One measured run: the graph at ``staleness``, the chosen members (profile names), ``prefetch``."""
    pool = [q for q, name in zip(qpus(members), names_of(members)) if chosen is None or name in chosen]
    res = hq.run(with_staleness(graph, staleness), synthetic.stream(steps, cfg), backends={"qpu": pool},
                 executor="local", prefetch=prefetch, max_retries=50, budget=budget, rows_per_job=rows_per_job)
    return res


def part_plans(args) -> dict:
    rows, errors, vs_best, vs_default, vs_bound, budgets = [], [], [], [], [], []
    print(f"{'C/Q':>5} {'pool':<18} {'budget':>7} {'plan':<26} {'pred s':>7} {'plan s':>7} {'best s':>7} "
          f"{'default s':>9} {'at s2':>7} {'spend':>7}")
    for sc in scenarios(args.quick):
        members = sc["pool"]
        q = members[0][2] + members[0][3] * 8  # the first QPU's job: 8 rows
        cfg = synthetic.Config(staleness=0, backend="qpu", batch=8, matrix=64,
                               repeats=synthetic.calibrate(sc["ratio"] * q * 1e3, matrix=64))
        graph = synthetic.build_graph(cfg)
        prof = calibration(lambda n, cut: hq.run(graph, synthetic.stream(n, cfg), backends={"qpu": qpus(members)},
                                                 max_retries=50, rows_per_job=cut).spans, args.calibrate, graph)
        budget = None
        if sc["budget"]:  # half-way between the cheapest member alone and every member together, retries counted
            per_job = [m[5] / (1 - m[4]) for m in members]
            cheapest = min(per_job) * args.steps
            budget = cheapest + 0.5 * (sum(per_job) / len(per_job) * args.steps - cheapest) + 1e-9
        names = names_of(members)
        try:
            plan = hq.plan(graph, args.steps, prof, budget=budget, rows=cfg.batch, prefetch=PREFETCH,
                           max_staleness=BOUND)
        except ValueError as exc:
            print(f"  no plan: {exc}")
            continue
        chosen = dict(plan.members)["qpu"]
        mine_runs = [run_config(graph, cfg, members, args.steps, plan.staleness, plan.config.prefetch, chosen, budget,
                                plan.config.rows_per_job) for _ in range(REPEATS)]
        found = None
        space = itertools.product(range(BOUND + 1), PREFETCH, cuts(members), range(1, len(names) + 1))
        for staleness, prefetch, cut, k in space:
            for subset in itertools.combinations(names, k):
                try:
                    res = run_config(graph, cfg, members, args.steps, staleness, prefetch, subset, budget, cut)
                except hq.RunFailed:  # past the budget
                    continue
                if (budget is None or spend(res) <= budget) and (found is None or makespan(res) < found[0]):
                    found = (makespan(res), (staleness, prefetch, subset, budget, cut))
        # the fastest of many noisy runs was lucky too (the winner's curse): measure it afresh, as the plan is
        if found is None:
            print(f"  no configuration kept the budget of {budget:g}")
            continue
        staleness, prefetch, subset, _, cut = found[1]
        best = statistics.median(makespan(run_config(graph, cfg, members, args.steps, staleness, prefetch, subset,
                                                     budget, cut)) for _ in range(REPEATS))
        default = statistics.median(makespan(run_config(graph, cfg, members, args.steps, 0, 1)) for _ in range(REPEATS))
        at_bound = makespan(run_config(graph, cfg, members, args.steps, BOUND, 1))
        mine = statistics.median(makespan(r) for r in mine_runs)
        paid = max(spend(r) for r in mine_runs)
        errors.append(abs(plan.prediction.makespan - mine) / mine)
        vs_best.append(best / mine)
        if len({m[0] for m in members}) > 1 and budget is None:  # the default knows no budget
            vs_default.append(default / mine)
            vs_bound.append(at_bound / mine)
        if budget is not None:
            budgets.append(paid <= budget + 1e-9)
        choice = (f"s{plan.staleness} p{plan.config.prefetch} r{plan.config.rows_per_job or 8} "
                  + ",".join(c.name for c in chosen))
        print(f"{sc['ratio']:>5g} {'+'.join(m[0] for m in members):<18} {budget or 0:>7.1f} {choice:<26} "
              f"{plan.prediction.makespan:>7.3f} {mine:>7.3f} {best:>7.3f} {default:>9.3f} {at_bound:>7.3f} "
              f"{paid:>7.1f}", flush=True)
        rows.append(sc)

    def geo(xs):
        return float(np.exp(np.mean(np.log(xs)))) if xs else None

    return {"scenarios": len(rows), "plan_vs_best": geo(vs_best), "prediction_error": statistics.median(errors),
            "plan_vs_default": geo(vs_default), "plan_vs_default_at_bound": geo(vs_bound), "budget_respected": f"{sum(budgets)}/{len(budgets)}",
            "budget_respected_all": all(budgets)}


SLOW_MEMBER = ("slow", 0.0, 0.05, 0.002, 0.0, 0.2)
FLAKY_MEMBER = ("flaky", 0.0, 0.004, 0.0004, 0.4, 0.3)


def synthetic_scenario(ratio: float, members, staleness: int = 0):
    """A synthetic loop whose learner takes ``ratio`` times the first QPU's 8-row job: (graph, its stream, run)."""
    q = members[0][2] + members[0][3] * 8
    cfg = synthetic.Config(staleness=staleness, backend="qpu", batch=8, matrix=64,
                           repeats=synthetic.calibrate(ratio * q * 1e3, matrix=64))
    graph = synthetic.build_graph(cfg)

    def run(steps, plan=None, rows_per_job=None):
        knobs = {"plan": plan} if plan is not None else {"rows_per_job": rows_per_job}  # the plan's own cut
        return hq.run(graph, synthetic.stream(steps, cfg), backends={"qpu": qpus(members)}, max_retries=50, **knobs)
    return graph, cfg.batch, run


README_POOL = [("emulated-qpu", {"per_job": 0.005, "per_circuit": 0.0001})] * 2 + \
    [("emulated-qpu", {"per_job": 0.05, "per_circuit": 0.0001, "queue_wait": 0.05})]
"""the README's ``hqflow plan classifier --steps 60 --backend emulated-qpu --pool 3 --backend-opt per_job=0.005
--backend-opt per_circuit=0.0001 --backend-opt 2:per_job=0.05 --backend-opt 2:queue_wait=0.05``"""
COMPUTING_POOL = [("emulated-qpu", {"per_job": 0.005})] * 3
"""three QPUs whose time is mostly their results' computation on this machine's CPUs"""


def classifier_scenario(pool):
    """The classifier workload on ``pool`` (emulated QPUs that compute their results here, beside the learner)."""
    from hqflow.workloads import classifier

    cfg = classifier.Config(backend="emulated-qpu", steps=60)
    graph = classifier.build_graph(cfg)
    x, y, _, _ = classifier.make_data(cfg)

    def run(steps, plan=None, rows_per_job=None):
        knobs = {"plan": plan} if plan is not None else {"rows_per_job": rows_per_job}
        return hq.run(graph, list(classifier.minibatches(dataclasses.replace(cfg, steps=steps), x, y)), seed=cfg.seed,
                      backends={"emulated-qpu": pool}, **knobs)
    return graph, None, run


def part_predictions(args) -> dict:
    """Calibrate, plan at each staleness bound, run the plan 3 times: the prediction's error (see the docstring)."""
    cases = [("classifier (README)", lambda: classifier_scenario(README_POOL), args.steps_classifier),
             ("synthetic fast+queued", lambda: synthetic_scenario(1.0, [FAST, QUEUED]), args.steps)]
    if not args.quick:
        cases += [("classifier computing", lambda: classifier_scenario(COMPUTING_POOL), args.steps_classifier),
                  ("synthetic rows+rows2", lambda: synthetic_scenario(0.3, [ROWS, ROWS2]), args.steps),
                  ("synthetic fast+slow", lambda: synthetic_scenario(3.0, [FAST, SLOW_MEMBER]), args.steps)]
    errors = []
    print(f"{'scenario':<24} {'cal':>4} {'bound':>5} {'plan':<22} {'pred s':>7} {'runs s (median of 3)':>21} {'error':>6}")
    for label, make, steps in cases:
        graph, rows_hint, run = make()
        for calibrate_steps in dict.fromkeys((args.calibrate, 10)):
            prof = calibration(lambda n, cut: run(n, rows_per_job=cut).spans, calibrate_steps, graph)
            rows = rows_of(graph, prof)
            for bound in range(BOUND + 1):
                plan = hq.plan(graph, steps, prof, rows=rows, max_staleness=bound)
                runs = sorted(makespan(run(steps, plan=plan)) for _ in range(REPEATS))
                measured = statistics.median(runs)
                error = abs(plan.prediction.makespan - measured) / measured
                errors.append(error)
                members = ",".join(f"{m.name}#{m.member}" if m.member is not None else m.name
                                   for m in next(iter(dict(plan.members).values())))
                choice = f"s{plan.staleness} p{plan.config.prefetch} w{plan.config.cpu_workers} {members}"
                print(f"{label:<24} {calibrate_steps:>4} {bound:>5} {choice[:22]:<22} {plan.prediction.makespan:>7.3f} "
                      f"{' '.join(f'{r:.3f}' for r in runs):>21} {error:>6.1%}", flush=True)
    return {"prediction_cells": len(errors), "prediction_error": statistics.median(errors),
            "prediction_error_worst": max(errors)}


def part_default_poor(args) -> dict:
    """Scenarios where the default configuration is poor: the plan against it (see the docstring)."""
    cases = [("slow member", lambda: synthetic_scenario(1.0, [FAST, SLOW_MEMBER])),
             ("row-heavy step", lambda: synthetic_scenario(0.3, [ROWS, ROWS2, ROWS]))]
    if not args.quick:
        cases += [("flaky member", lambda: synthetic_scenario(1.0, [FAST, FLAKY_MEMBER])),
                  ("learner slower than QPU", lambda: synthetic_scenario(3.0, [FAST]))]
    ratios = []
    print(f"{'scenario':<24} {'plan':<26} {'plan s':>7} {'default s':>9} {'ratio':>6}")
    for label, make in cases:
        graph, rows, run = make()
        prof = calibration(lambda n, cut: run(n, rows_per_job=cut).spans, args.calibrate, graph)
        plan = hq.plan(graph, args.steps, prof, rows=rows_of(graph, prof), max_staleness=BOUND)
        mine = statistics.median(makespan(run(args.steps, plan=plan)) for _ in range(REPEATS))
        default = statistics.median(makespan(run(args.steps)) for _ in range(REPEATS))
        ratios.append(default / mine)
        members = ",".join(f"{m.name}#{m.member}" if m.member is not None else m.name for m in dict(plan.members)["qpu"])
        choice = f"s{plan.staleness} p{plan.config.prefetch} r{plan.config.rows_per_job or 'all'} {members}"
        print(f"{label:<24} {choice[:26]:<26} {mine:>7.3f} {default:>9.3f} {default / mine:>6.2f}", flush=True)
    return {"plan_vs_default_poor": float(np.exp(np.mean(np.log(ratios)))),
            "plan_vs_default_poor_min": min(ratios)}


def part_elastic(steps: int) -> dict:
    cfg = synthetic.Config(staleness=0, backend="qpu", batch=8)
    graph = synthetic.build_graph(cfg)

    def qpu(name):
        return EmulatedQPU(per_job=0.005, per_circuit=0.0002, name=name)

    clean = hq.run(graph, synthetic.stream(steps, cfg), backends={"qpu": [qpu("a"), qpu("b")]})
    three = hq.run(graph, synthetic.stream(steps, cfg), backends={"qpu": [qpu("a"), qpu("c"), qpu("d")]})
    done, marks = [0], {}
    run = hq.start(graph, synthetic.stream(steps, cfg), backends={"qpu": [qpu("a"), qpu("b")]},
                   progress=lambda n, out: done.__setitem__(0, n))

    def change():
        while done[0] < steps // 4 and not run.done():
            time.sleep(0.001)
        run.remove_backend("qpu", "b")
        while done[0] < steps // 2 and not run.done():
            time.sleep(0.001)
        run.add_backend("qpu", qpu("c"))
        run.add_backend("qpu", qpu("d"))
        marks["added"] = time.perf_counter()

    t = threading.Thread(target=change)
    t.start()
    res = run.result()
    t.join()
    jobs = [s for s in res.spans if s.kind == "execute" and s.outcome == "ok"]
    once = np.bincount([s.step for s in jobs], minlength=steps)
    same = all(np.array_equal(a["loss"], b["loss"]) for a, b in zip(res.outputs, clean.outputs)) \
        and np.array_equal(res.state["learn.weights"], clean.state["learn.weights"]) and len(res.outputs) == steps
    after = [s for s in res.spans if s.fragment == "learn" and s.step >= steps // 2 + 5]
    rate_after = len(after) / (max(s.end for s in after) - min(s.start for s in after))
    steady = [s for s in three.spans if s.fragment == "learn" and s.step >= steps // 2 + 5]
    rate_three = len(steady) / (max(s.end for s in steady) - min(s.start for s in steady))
    print(f"  {steps} steps: result {'identical' if same else 'DIFFERENT'}; steps whose job ran other than once: "
          f"{int((once != 1).sum())}; steps/s after the addition {rate_after:.1f} against {rate_three:.1f} with the "
          f"three from the start")
    return {"elastic_same_result": bool(same), "elastic_lost": int((once == 0).sum()),
            "elastic_duplicated": int((once > 1).sum()), "elastic_rate_after_add": rate_after / rate_three,
            "elastic_taken_back": sum(1 for s in res.spans if s.outcome == "cancelled")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="3 scenarios, fewer steps (< 2 minutes)")
    ap.add_argument("--steps", type=int, default=None, help="steps of each measured run (default 30; quick 16)")
    ap.add_argument("--calibrate", type=int, default=16, help="steps of each calibration run (default 16)")
    ap.add_argument("--elastic-steps", type=int, default=None, help="steps of the elastic run (default 200; quick 100)")
    ap.add_argument("--steps-classifier", type=int, default=None,
                    help="steps of the classifier's runs (default 60, the README's; quick 30)")
    args = ap.parse_args(argv)
    args.steps = args.steps or (16 if args.quick else 30)
    args.elastic_steps = args.elastic_steps or (100 if args.quick else 200)
    args.steps_classifier = args.steps_classifier or (30 if args.quick else 60)
    if args.steps < 4 or args.calibrate < 3 or args.elastic_steps < 20:
        ap.error("need --steps >= 4, --calibrate >= 3 and --elastic-steps >= 20")
    torch.set_num_threads(1)
    start = time.perf_counter()
    print(f"1. plans: staleness 0..{BOUND}, prefetch {PREFETCH}, rows per job, the pool's members; "
          f"{args.steps} steps a run")
    figures = part_plans(args)
    figures["plan_prediction_error"] = figures.pop("prediction_error")
    print(f"\n2. predictions: each scenario calibrated with {args.calibrate} and 10 steps, planned at staleness "
          f"bounds 0..{BOUND}, the plan run {REPEATS} times")
    figures.update(part_predictions(args))
    print(f"\n3. where the default is poor (staleness up to {BOUND} allowed)")
    figures.update(part_default_poor(args))
    print(f"\n4. elastic: {args.elastic_steps} steps; remove one of two QPUs at 1/4, add two at 1/2")
    figures.update(part_elastic(args.elastic_steps))
    targets = {"plan_vs_best": (figures["plan_vs_best"] or 0) >= 0.9, "prediction_error": figures["prediction_error"] <= 0.10,
               "prediction_error_worst": figures["prediction_error_worst"] <= 0.20,
               "plan_vs_default_poor": figures["plan_vs_default_poor"] >= 1.5, "budget_respected": figures["budget_respected_all"],
               "elastic_same_result": figures["elastic_same_result"],
               "elastic_lost_and_duplicated": figures["elastic_lost"] == 0 and figures["elastic_duplicated"] == 0,
               "elastic_rate_after_add": figures["elastic_rate_after_add"] >= 0.9}
    figures["targets"] = targets
    figures["seconds"] = round(time.perf_counter() - start, 1)
    print("\ntargets: " + ", ".join(f"{k} {'ok' if v else 'MISSED'}" for k, v in targets.items()))
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
