"""The CLI's settings of what a run costs on a paid target: shots, the gradient estimator, a shot budget.

``hqflow train`` takes them as flags (the same as ``--set shots=N`` and so on); ``add_cost_arguments`` adds
the group and ``cost_overrides`` reads it back. ``cost_report`` and ``spend_figures`` say what a training run
costs as it goes and what it spent.
"""
from __future__ import annotations

import argparse
import sys

from hqflow.ir.text import number, shown

from .pool import choice
from hqflow.gradients import GRADIENTS, METHODS, GradientMethod
from hqflow.jobs.ledger import money

OBJECTIVES = ("time", "cost")


def _typed(kind: type, expected: str, ok):
    """An argparse type: a ``kind`` (int or float) for which ``ok`` holds, or a one-line error saying ``expected``."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:  # (an integer of more than 4,300 digits too)
            value = None
        if value is None or not ok(value):
            got = number(value) if isinstance(value, int) else shown(text)  # a parsed int, else the text
            raise argparse.ArgumentTypeError(f"expected {expected}, got {got}")
        return value
    return parse


def _at_least(low: int, expected: str, high: int = 2**63 - 1):
    """An integer in ``low..high`` (the default: what numpy and torch take as a seed or a count)."""
    return _typed(int, expected if high == 2**63 - 1 else f"{expected} (at most {high:,})", lambda v: low <= v <= high)


_epsilon = _typed(float, "a number in (0, 3.2]", lambda v: 0 < v <= 3.2)
_amount = _typed(float, "an amount >= 0", lambda v: 0 <= v < float("inf"))


def add_cost_arguments(parser: argparse.ArgumentParser, run: bool = False) -> None:
    """The group of flags ``--shots``, ``--gradient``, ``--spsa-samples``, ``--spsa-epsilon`` and ``--shot-budget``;
    ``run``: ``hqflow run``'s (no ``--shot-budget``), each setting the workload's config field of its name."""
    group = parser.add_argument_group(*(
        ("gradient and shots", "each sets the workload's field of that name; a workload without it refuses the flag")
        if run else ("cost on a paid target", "shots, the gradient estimator and a shot budget (README: Train on a "
                     "paid target)")))
    circuit, per, centre = ("training", "row", "1 + ") if run else ("policy", "state", "")
    group.add_argument("--shots", type=_at_least(1, "a positive number of shots"), help=(
        "classifier, vqe: shots per training circuit (default: exact values); qaoa: shots when sampling the trained "
        "circuit" if run else "shots per circuit on any backend (default: exact values where the backend has them)"))
    names = GRADIENTS if run else METHODS
    group.add_argument("--gradient", choices=names, type=choice(names), help=f"the {circuit} circuit's gradient: "
                       f"param-shift (default; exact, 1 + 2 x parameters circuits per {per}), spsa (an estimate, "
                       f"{centre}2 x --spsa-samples circuits per {per})" + ("" if run else " or twin (the backend only "
                       "acts, 1 circuit per state; a local twin, --twin-noise's, differentiates)"))
    group.add_argument("--spsa-samples", type=_at_least(1, "a positive number of directions"), metavar="K",
                       help="with --gradient spsa: random directions per step (default 2, in hqflow run and train)")
    group.add_argument("--spsa-epsilon", type=_epsilon, metavar="E",
                       help="with --gradient spsa: perturbation size (default 0.1)")
    if not run:
        group.add_argument("--twin-noise", metavar="TARGET", help="with --gradient twin: the target whose noise "
                           "model the twin simulates, e.g. ionq.qpu.aria-1 (default: noiseless)")
        group.add_argument("--shot-budget", type=_at_least(1, "a positive number of shots"), metavar="N",
                           help="the most shots the run may use; past it the run stops, checkpointed")


def cost_overrides(args) -> dict:
    """The config fields these flags set (those given)."""
    return {k: getattr(args, k) for k in ("shots", "gradient", "spsa_samples", "spsa_epsilon", "twin_noise")
            if getattr(args, k, None) is not None}


def add_dry_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true", help="submit nothing: run a few updates on dry-run:BACKEND "
                        "(each job priced by the real target, answered by a local simulator) and print what the "
                        "run would use: service jobs, circuits, shots and list price, per episode and projected")
    parser.add_argument("--dry-run-updates", type=_at_least(1, "a positive number of updates", 1000), default=1,
                        metavar="N", help="with --dry-run: updates to run (default 1)")


def dry_run_tally():
    """Register ``dry-run:<backend>`` for this process with a fresh ``Tally`` (every job priced into it, none
    submitted) and return the tally."""
    from hqflow.backends import register_backend
    from hqflow.backends.dryrun import DryRunBackend, Tally

    tally = Tally()
    register_backend("dry-run", lambda target=None, **o: DryRunBackend(target, tally, **o), listed=False,
                     suffix="target")
    return tally


_range = _typed(lambda text: tuple(int(x) for x in text.split(":")), "LO:HI with 1 <= LO <= HI",
                lambda bound: len(bound) == 2 and 1 <= bound[0] <= bound[1])
_gradients = _typed(lambda text: tuple(dict.fromkeys(n.strip().lower() for n in text.split(","))),
                    f"{' and/or '.join(GRADIENTS)}, comma-separated", lambda names: set(names) <= set(GRADIENTS))


def add_frugal_arguments(parser: argparse.ArgumentParser) -> None:
    """``--objective`` and the bounds it may choose within: ``--gradients``, ``--shots-range``,
    ``--spsa-samples-range`` (``hqflow train --plan auto``)."""
    group = parser.add_argument_group("what --plan auto minimizes", "--objective cost chooses the gradient, shots "
                                      "and packing within the bounds given; a setting without one stays as configured")
    group.add_argument("--objective", choices=OBJECTIVES, type=choice(OBJECTIVES), help="with --plan auto: time "
                       "(default: the scheduler knobs for the shortest run) or cost (first the fewest circuits and the "
                       "cheapest shots within the bounds, then the scheduler knobs for time)")
    group.add_argument("--gradients", type=_gradients, metavar="LIST", help="with --objective cost: the gradients "
                       "it may choose, e.g. param-shift,spsa (default: the configured one)")
    group.add_argument("--shots-range", type=_range, metavar="LO:HI", help="with --objective cost: "
                       "the shots it may choose (default: the configured shots)")
    group.add_argument("--spsa-samples-range", type=_range, metavar="LO:HI",
                       help="with --objective cost: the SPSA directions it may choose (default: the configured)")


def frugal_bounds(args):
    """The ``hqflow.workloads.rl.frugal.Bounds`` the flags give (None: not ``--objective cost``); a bound without
    ``--plan auto --objective cost``, or beside the setting it bounds, is a usage error."""
    from .pool import UsageError
    from hqflow.workloads.rl.frugal import Bounds

    given = {"--gradients": args.gradients, "--shots-range": args.shots_range,
             "--spsa-samples-range": args.spsa_samples_range}
    if args.objective is not None and not args.plan:
        raise UsageError("--objective goes with --plan auto")
    if args.objective != "cost":
        flag = next((f for f, v in given.items() if v is not None), None)
        if flag:
            raise UsageError(f"{flag} goes with --plan auto --objective cost")
        return None
    for flag, fixed in (("--gradients", "--gradient"), ("--shots-range", "--shots"),
                        ("--spsa-samples-range", "--spsa-samples")):
        if given[flag] is not None and getattr(args, fixed[2:].replace("-", "_")) is not None:
            raise UsageError(f"give {fixed} or {flag}, not both")
    return Bounds(args.gradients, args.shots_range, args.spsa_samples_range)


def check_target(members, algo: str, cfg, budget=None, dry_run: bool = False) -> None:
    """At a run's start, one line: shots a member refuses, or no price where --budget or --dry-run needs one."""
    from hqflow.workloads.rl import frugal, runner

    from .pool import UsageError

    try:
        frugal.check_target(members, runner.algorithm(algo), cfg,
                            "--dry-run" if dry_run else None if budget is None else "--budget")
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def cost_report(bar, updates: int):
    """The progress callback, plus one line after this process's first priced update: what that update cost and
    what the run's updates left will cost at that rate."""
    said = []

    def report(done, metrics=None):
        bar(done, metrics)
        row = (metrics or {}).get("row", {})  # the update's metrics row
        if row.get("currency") and row.get("list_cost") is not None and not said:
            said.append(row)
            cost, left = row["list_cost"], updates - row["update"] - 1
            first = "the first update" if row["update"] == 0 else f"update {row['update'] + 1}"
            bar.write(f"hqflow: {first} cost {money(cost, row['currency'])}; the {left} updates left at that rate: "
                      f"about {money(cost * left, row['currency'])} more (--budget caps a run)")
    return report


def spend_figures(out: dict) -> dict:
    """A training run's figures of spend (``out``: ``runner.train``'s), and one line on stderr when it paid for
    more than its updates used."""
    from hqflow.workloads.rl.runner import record_amount

    figures = {}
    if out.get("currency"):
        figures["spend"], figures["currency"] = out["spend"], out["currency"]  # None: a price is unknown
    used, paid = out["usage"], out["paid"]
    if used["circuits"]:  # jobs ran: what the updates' jobs used (list price where the backend prices its jobs)
        figures.update(service_jobs=used["service_jobs"], circuits=used["circuits"], shots=used["shots"],
                       list_cost=record_amount(used["cost"]))
        if used["currency"]:
            figures["currency"] = used["currency"]
    if out["currency"] and (paid["service_jobs"] > used["service_jobs"] or (out["spend"] or 0) > used["cost"] + 1e-6):
        print(f"hqflow: the run paid for {paid['service_jobs']:,} service jobs ({money(out['spend'], out['currency'])})"
              f"; its updates used {used['service_jobs']:,} ({money(used['cost'], used['currency'])}): the rest went "
              "to work a stop or a kill cut short (ledger.jsonl has every charge)", file=sys.stderr)
    return figures


def say_step_cost(algo: str, cfg, circuits: float, parameters: int) -> None:
    """One line on stderr: about how many circuits an environment step of a training run on a job backend runs."""
    how = {GradientMethod.SPSA: f"SPSA with {cfg.spsa_samples} directions", GradientMethod.TWIN: "a local twin: no "
           "circuit"}.get(cfg.gradient, f"parameter shift over the policy circuit's {parameters} parameters")
    print(f"hqflow: an environment step runs about {circuits:.4g} circuits on {cfg.backend} (acting, and "
          f"{algo}'s gradients by {how}); on a cloud target that takes one circuit per job (IonQ, "
          "Quantinuum) each is a service job per measurement group", file=sys.stderr)
