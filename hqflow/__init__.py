"""hqflow: a runtime for hybrid classical/quantum programs.

    import hqflow as hq
    pipe = hq.Pipeline("demo")          # build a graph of fragments
    graph = pipe.build()                 # plain data: print / to_json / draw
    result = hq.run(graph, stream)       # run it (overlap scheduler; executor="sync" | "local" | "ray")
    best = hq.plan(graph, steps, profile)  # or let the cost model choose the knobs; hq.run(..., plan=best)
"""
import os as _os

# In a source checkout, ir/, backends/, workloads/ and cli/ sit beside this folder (installed as hqflow.ir, ...):
# when Python imports hqflow from the checkout itself (``python -c`` at the repo root), find them there too.
_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isfile(_os.path.join(_root, "pyproject.toml")) and _os.path.isdir(_os.path.join(_root, "ir")):
    __path__.append(_root)

__version__ = "0.1.0"

# The names below load on first use (PEP 562), so that ``import hqflow.ir`` (the ground floor) or
# ``import hqflow.backends`` loads neither the scheduler nor the planner.
_EXPORTS = {
    "FragmentError": "engine.fragments", "RunFailed": "engine.result", "RunResult": "engine.result",
    "BudgetExceeded": "jobs.service", "JobClient": "jobs.client", "RetriesExhausted": "jobs.service",
    "get_client": "jobs.client",
    "Pipeline": "pipeline",
    "Plan": "planning.planner", "plan": "planning.planner",
    "RunHandle": "engine.elastic", "Scheduler": "engine.scheduler", "SchedulerConfig": "engine.scheduler_config",
    "Span": "trace",
}


def run(graph, stream, *, plan=None, backends=None, **options):
    """``hqflow.run``: the scheduler's ``run``, after applying ``plan`` if one is given (its knobs; any
    other ``SchedulerConfig`` option given here wins)."""
    import dataclasses

    from .engine.scheduler import run as _run
    from .planning.planner import apply, renamed

    if plan is None:
        return _run(graph, stream, backends=backends, **options)
    if "config" in options:
        raise ValueError("give a plan or a config, not both: a plan carries its SchedulerConfig")
    graph, chosen, config = apply(plan, graph, backends)
    result = _run(graph, stream, backends=chosen, config=config, **options)  # options override the plan's
    return dataclasses.replace(result, spans=renamed(plan, result.spans))


def start(graph, stream, *, plan=None, backends=None, **options):
    """``hqflow.start``: the scheduler's ``start``, after applying ``plan`` if one is given. With a plan, every
    ``add_backend`` and ``remove_backend`` re-plans (:func:`replan`) for the pool now and the steps left and
    applies its prefetch and rows per job at once; ``handle.plans`` lists the plans in force, first first."""
    from .common.lanes import Lane
    from .engine.scheduler import start as _start
    from .planning.planner import planned_lane, apply, replan

    if plan is None:
        return _start(graph, stream, backends=backends, **options)
    if "config" in options:
        raise ValueError("give a plan or a config, not both: a plan carries its SchedulerConfig")
    planned, backends, config = apply(plan, graph, backends)

    def changed(handle) -> None:  # (the members' lanes in the plan's profile; one that joined: its own)
        members = {pool: [planned_lane(plan, Lane("qpu", pool), lane) for lane in now] for pool, now in
                   handle.members().items()}
        new = replan(handle.plans[-1], planned, max(1, plan.steps - handle.steps_done()), members)
        handle.tune(prefetch=new.config.prefetch, rows_per_job=new.config.rows_per_job)
        handle.plans.append(new)

    handle = _start(planned, stream, backends=backends, config=config, on_change=changed, **options)
    handle.plans.append(plan)
    return handle


def __getattr__(name: str):
    import importlib

    module = _EXPORTS.get(name)
    if module is None:
        if name.startswith("_"):
            raise AttributeError(f"module 'hqflow' has no attribute {name!r}")
        try:  # a submodule: hq.trace, hq.distribution, ...
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module 'hqflow' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = sorted([*_EXPORTS, "__version__", "run", "start"])
