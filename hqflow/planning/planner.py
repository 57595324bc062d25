"""The planner: how to run a graph, chosen by the cost model (Alpa's lesson: a plan is an optimization).

``plan(graph, steps, profile, ...)`` predicts each choice of the knobs a user would otherwise set by
hand with ``hqflow.planning.costmodel``: the staleness of the loop edges between fragments (at most the graph's
own: a plan never lets parameters be older than the algorithm allows), ``prefetch``, ``rows_per_job``,
``cpu_workers`` (where a classical fragment without a loop onto itself can run several steps at once)
and the subset of each pool's members to use. Shots are not searched: they change the estimator, which
only the user may trade. The objective is ``"time"``, ``"cost"`` (the least spend, then the shortest),
or time under ``budget``.

``hq.run(graph, stream, plan=plan)`` (``hqflow/run.py``) runs a plan: ``apply`` gives its graph, backends
and config. A plan never changes the algorithm, only where and how much runs at once: at staleness 0 with
exact backends it never changes the result.
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hqflow.ir.graph import CircuitCall, Graph

from .costmodel import Prediction, calibrate, calibrate_cores, pool_names, predict
from ..common.lanes import Lane, member
from ..jobs.ledger import check_budgets
from .profile import Profile, profile
from ..engine.scheduler import SchedulerConfig

OBJECTIVES = ("time", "cost")
PREFETCH = (0, 1, 2, 4)
HORIZON = 60
"""steps simulated to rank the finalists (the chosen plan is then predicted over all steps)"""
SCREEN, FINALISTS = 16, 6
"""every candidate is first simulated over ``SCREEN`` steps; the ``FINALISTS`` best over ``HORIZON``"""


@dataclass(frozen=True)
class Plan:
    staleness: int
    """max_staleness of the loop edges from one fragment to another (self-loops stay 0)"""
    config: SchedulerConfig
    """the scheduler knobs: prefetch, window (and what the caller gave)"""
    members: tuple[tuple[str, tuple[Lane, ...]], ...]
    """per pool name, the members to use: their lanes in the profile (``#k``: the pool's k-th)"""
    prediction: Prediction
    objective: str
    budget: float | None
    candidates: int
    """configurations predicted in the search"""
    profile: Profile | None = field(default=None, repr=False, compare=False)
    """what the plan was made from (a re-plan on a resource change starts from it)"""
    rows: int | Mapping[str, int] = field(default=1, repr=False, compare=False)
    """circuits per step of each execute fragment, as given to :func:`plan`"""
    steps: int = field(default=0, repr=False, compare=False)

    def __str__(self) -> str:
        p = self.prediction
        budget = "" if self.budget is None else f" under a budget of {self.budget:,.2f}"
        rows = [("objective", self.objective + budget),
                ("staleness", str(self.staleness)), ("prefetch", str(self.config.prefetch)),
                ("rows per job", "all" if self.config.rows_per_job is None else str(self.config.rows_per_job)),
                ("cpu workers", str(self.config.cpu_workers)),
                ("window", "auto" if self.config.window is None else str(self.config.window))]
        rows += [(f"pool {name}", ", ".join(map(str, m)) or "-") for name, m in self.members]
        rows += [("predicted makespan", f"{p.makespan:.3f} s (bound {p.bound:.3f} s)"),
                 ("predicted spend", f"{p.spend:,.2f}"), ("jobs", str(p.jobs)),
                 ("predicted usage", f"{p.service_jobs:,} service jobs, {p.circuits:,} circuits, {p.shots:,} shots")]
        rows += [(f"utilization {k}", f"{v:.0%}") for k, v in p.utilization.items()]
        rows += [("candidates", str(self.candidates))]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def _between(edge) -> bool:
    """A loop edge from one fragment to another (a plan's staleness applies to these; self-loops stay)."""
    return edge.loop and edge.src[0] != edge.dst[0]


def with_staleness(graph: Graph, staleness: int) -> Graph:
    """``graph`` with every loop edge between two fragments at ``max_staleness=staleness``."""
    edges = tuple(dataclasses.replace(e, max_staleness=staleness) if _between(e) else e for e in graph.edges)
    return dataclasses.replace(graph, edges=edges)


def _cuts(rows: int | Mapping[str, int], devices: int) -> list[int | None]:
    """``rows_per_job`` values worth trying: the largest step cut into 1 .. ``devices`` (at most 8) jobs."""
    n = rows if isinstance(rows, int) else max(rows.values(), default=1)
    sizes = {-(-n // k) for k in range(2, min(n, devices, 8) + 1)}
    return [None] + sorted((x for x in sizes if x < n), reverse=True)


def _workers(graph: Graph) -> list[int]:
    """``cpu_workers`` values worth trying: more than one only where a ``cpu`` fragment has no loop onto
    itself (only then can two of its steps run at once)."""
    looped = {e.src[0] for e in graph.edges if e.loop and e.src[0] == e.dst[0]}
    free = [f for f in graph.fragments if not isinstance(f, CircuitCall) and f.kind != "learn" and f.resource != "gpu"
            and f.name not in looped]
    return list(range(1, min(4, os.cpu_count() or 1) + 1)) if free else [1]


def plan(graph: Graph, steps: int, profile: Profile, *, objective: str = "time", budget: float | None = None,
         max_staleness: int | None = None, config: SchedulerConfig = SchedulerConfig(executor="local"),
         rows: int | Mapping[str, int] = 1, prefetch: tuple[int, ...] = PREFETCH,
         rows_per_job: Sequence[int | None] | None = None) -> Plan:
    """The best configuration the cost model finds (see the module docstring); ``prefetch``: the values tried;
    ``rows_per_job``: the values tried (default: None and the largest step cut into 2 .. the pool's devices)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    check_budgets(budget)
    limit = max((e.max_staleness for e in graph.edges if _between(e)), default=0) if max_staleness is None \
        else max_staleness
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"max_staleness must be an integer >= 0, got {limit!r}")
    pools = {name: [b.backend for b in profile.backends if b.pool.name == name]
             for name in pool_names(graph, profile)}
    for name, names in pools.items():
        if not names:
            raise ValueError(f"no profile of a backend in pool {name!r}: calibrate with a run that uses it")
    devices = sum(max(1, b.devices) for b in profile.backends if b.pool.name in pools)
    subsets = [[c for k in range(len(n), 0, -1) for c in itertools.combinations(n, k)] for n in pools.values()]
    cuts = _cuts(rows, devices) if rows_per_job is None else list(rows_per_job)
    if not cuts:
        raise ValueError("rows_per_job must give at least one value to try (None: all rows in one job)")
    space = itertools.product(range(limit + 1), prefetch, cuts, _workers(graph),
                              itertools.product(*subsets))  # each pool's subsets of members, the largest first

    def score(candidate, horizon: int):
        """The candidate's predicted spend over all steps, its ranking key over ``horizon`` steps, and its plan."""
        staleness, ahead, cut, workers, chosen = candidate
        members = dict(zip(pools, chosen))
        cfg = dataclasses.replace(config, prefetch=ahead, window=None, rows_per_job=cut, cpu_workers=workers)
        guess = predict(with_staleness(graph, staleness), horizon, profile, cfg, rows=rows, members=members)
        spend = guess.spend * (steps / horizon if horizon else 0.0)
        primary = (spend, guess.makespan) if objective == "cost" else (guess.makespan, spend)
        # ties: fresher parameters, fewer jobs ahead, fewer and larger jobs, fewer workers, fewer QPUs
        key = (*(round(x, 9) for x in primary), staleness, ahead, -(cut or 1 << 30), workers,
               sum(len(m) for m in chosen))
        return spend, key, candidate, (staleness, cfg, members)

    def fitting(found: list) -> list:  # those within the budget, or say what the cheapest is predicted to spend
        if not (kept := [f for f in found if budget is None or f[0] <= budget]):
            raise ValueError(f"no configuration fits a budget of {budget:,.2f}: the cheapest is predicted to spend "
                             f"{min(f[0] for f in found):,.2f}")
        return sorted(kept, key=lambda f: f[1])

    candidates, longer = list(space), []
    for _, _, candidate, _ in fitting([score(c, min(steps, SCREEN)) for c in candidates]):
        longer.append(score(candidate, min(steps, HORIZON)))  # the best that keep the budget over longer too
        if sum(budget is None or f[0] <= budget for f in longer) == FINALISTS:
            break
    finals = []  # over all steps
    for _, _, _, (staleness, cfg, members) in fitting(longer):
        final = predict(with_staleness(graph, staleness), steps, profile, cfg, rows=rows, members=members)
        finals.append((final.spend, None, None, None))
        if budget is None or final.spend <= budget:
            break
    else:
        fitting(finals)  # none fits over all steps: says what the cheapest is predicted to spend
    return Plan(staleness, cfg, tuple((k, tuple(v)) for k, v in members.items()), final, objective, budget,
                len(candidates), profile, rows, steps)


def replan(plan: Plan, graph: Graph, steps: int, members: Mapping[str, Sequence[Lane | str]],
           profile: Profile | None = None) -> Plan:
    """``plan`` made again for pools that changed: ``members`` are their members now (lanes or names, by
    pool: ``hqflow.common.lanes.member``), ``steps`` the steps left. Staleness and worker slots stay (a run does not
    change its algorithm mid-way); prefetch and rows per job are searched again. A member the profile does
    not know is taken to be like the pool's median member (the next profile measures it)."""
    members = {pool: [member(m) for m in names] for pool, names in members.items()}
    prof = _with_members(profile or plan.profile, members)
    graph = with_staleness(graph, plan.staleness)

    def key(cfg: SchedulerConfig) -> tuple:  # the shortest; ties: fewer jobs ahead, fewer and larger jobs
        guess = predict(graph, min(steps, HORIZON), prof, cfg, rows=plan.rows, members=members)
        return round(guess.makespan, 9), cfg.prefetch, -(cfg.rows_per_job or 1 << 30)

    cuts = _cuts(plan.rows, sum(len(m) for m in members.values()))
    cfg = min((dataclasses.replace(plan.config, prefetch=ahead, rows_per_job=cut)
               for ahead, cut in itertools.product(PREFETCH, cuts)), key=key)
    final = predict(graph, steps, prof, cfg, rows=plan.rows, members=members)
    return dataclasses.replace(plan, config=cfg, members=tuple((k, tuple(v)) for k, v in members.items()),
                               prediction=final, candidates=len(PREFETCH), profile=prof, steps=steps)


def _with_members(profile: Profile, members: Mapping[str, Sequence[Lane]]) -> Profile:
    """``profile`` with a stand-in for every member it has not measured: its pool's median member."""
    known = {b.backend for b in profile.backends}
    extra = []
    for pool, names in members.items():
        peers = sorted((b for b in profile.backends if b.pool.name == pool), key=lambda b: b.seconds(1))
        for name in names:
            if name not in known and peers:
                extra.append(dataclasses.replace(peers[len(peers) // 2], backend=name, jobs=0))
    return dataclasses.replace(profile, backends=profile.backends + tuple(extra))


def rows_of(graph: Graph, profile: Profile) -> dict[str, int]:
    """Circuits per step of each ``execute`` fragment of ``graph`` as ``profile`` measured them (else 1)."""
    return {f.name: dict(profile.rows).get(f.name, 1) for f in graph.fragments if isinstance(f, CircuitCall)}


def calibration(run, steps: int, graph: Graph, config: SchedulerConfig = SchedulerConfig(), rounds: int = 3,
                settle: float = 0.1) -> Profile:
    """A profile from calibration runs: ``run(steps, rows_per_job)`` runs the workload (``graph`` under
    ``config``) and returns its spans. ``run(steps, None)`` gives the fragments' times, the rows per step and
    the scheduler's overhead. Where all its jobs had the same rows ``n > 1`` (per-job and per-row time look
    alike), ``run(max(2, steps // 2), ceil(n / 2))`` joins the backends' fit, and on a pool of several members,
    where its halves run side by side, gives the CPUs the run's own work gets (``costmodel.calibrate_cores``).
    Those runs are a round; rounds go on until two in a row predict a run of ``steps`` within ``settle`` of
    each other (at most ``rounds``). The profile is the round whose prediction is the median, with the pool
    members' figures of every round merged: a round that the machine's load upset is outvoted."""
    fits, guesses = [], []
    while len(fits) < rounds and not (len(fits) > 1 and abs(guesses[-1] - guesses[-2]) <= settle * min(guesses[-2:])):
        fits.append(_round(run, steps, graph, config))
        guesses.append(predict(graph, steps, fits[-1], config, rows=rows_of(graph, fits[-1])).makespan)
    middle = fits[sorted(range(len(fits)), key=guesses.__getitem__)[(len(fits) - 1) // 2]]
    return dataclasses.replace(middle, backends=functools.reduce(Profile.merged, fits).backends)


def _round(run, steps: int, graph: Graph, config: SchedulerConfig) -> Profile:
    """One round of :func:`calibration`'s runs, fitted."""
    first = list(run(steps, None))
    jobs = [s for s in first if s.resource.quantum and s.outcome.ok and s.rows]
    sizes = {s.rows for s in jobs}
    fitted, cut = profile(first), None
    if len(sizes) == 1 and min(sizes) >= 2:
        half = -(-min(sizes) // 2)
        cut = list(run(max(2, steps // 2), half))
        fitted = dataclasses.replace(profile(first + cut), fragments=fitted.fragments, rows=fitted.rows)
    rows = rows_of(graph, fitted)
    fitted = calibrate(graph, first, fitted, config, rows=rows)
    if cut is not None and len(fitted.backends) > 1:  # its parts ran side by side: how many CPUs they shared
        for _ in range(2):  # the overhead fitted without the CPUs' sharing took some of it: fit both again
            shared = calibrate_cores(graph, cut, fitted, dataclasses.replace(config, rows_per_job=half), rows=rows)
            if shared.cores is None:
                break
            fitted = calibrate(graph, first, shared, config, rows=rows)
    return fitted


def apply(plan: Plan, graph: Graph, backends: Mapping | None = None) -> tuple[Graph, dict, SchedulerConfig]:
    """``(graph, backends, config)`` to run ``plan``: its staleness, its pool members (``#k``: the k-th
    of the pool ``backends`` gives), its scheduler knobs."""
    if plan.staleness and not any(_between(e) for e in graph.edges):
        raise ValueError(f"the plan's staleness {plan.staleness} needs a loop edge between two fragments, and "
                         "this graph has none: plan with this graph")
    chosen = dict(plan.members)
    out = dict(backends or {})
    for name, members in chosen.items():
        given = out.get(name)
        if isinstance(given, list) and len(given) > 1:
            keep = [m.member for m in members if m.member is not None]
            if len(keep) != len(members) or any(k >= len(given) for k in keep):
                raise ValueError(f"the plan's members of pool {name!r} ({', '.join(map(str, members))}) are not in "
                                 "the pool given")
            out[name] = [given[k] for k in keep]
    return with_staleness(graph, plan.staleness), out, plan.config


def renamed(plan: Plan, spans: list) -> list:
    """``spans`` of a run of ``plan``, each member's lane as in the pool the plan was made for (``#k``), not by
    its place among the members ``apply`` kept: what a run measures is filed under the member that ran it."""
    return [s if s.lane is None else dataclasses.replace(s, lane=planned_lane(plan, s.resource, s.lane)) for s in spans]


def planned_lane(plan: Plan, pool: Lane, lane: Lane) -> Lane:
    """The lane in ``plan``'s profile of the member of pool ``pool`` that has ``lane`` in a run of the plan."""
    chosen, k = dict(plan.members).get(pool.name, ()) if pool.quantum else (), lane.member or 0
    return chosen[k].at(lane.slot) if k < len(chosen) and all(m.member is not None for m in chosen) else lane


__all__ = ["OBJECTIVES", "Plan", "apply", "calibration", "plan", "renamed", "replan", "rows_of", "with_staleness"]
