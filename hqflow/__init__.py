"""hqflow: a runtime for hybrid classical/quantum programs.

    import hqflow as hq
    pipe = hq.Pipeline("demo")          # build a graph of fragments
    graph = pipe.build()                 # plain data: print / to_json / draw
    result = hq.run(graph, stream)       # run it (overlap scheduler; executor="sync" | "local" | "ray")
    best = hq.plan(graph, steps, profile)  # or let the cost model choose the knobs; hq.run(..., plan=best)
"""
import os as _os

# In a source checkout, ir/, backends/ and workloads/ sit beside this folder (installed as hqflow.ir, ...):
# when Python imports hqflow from the checkout itself (``python -c`` at the repo root), find them there too.
_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isfile(_os.path.join(_root, "pyproject.toml")) and _os.path.isdir(_os.path.join(_root, "ir")):
    __path__.append(_root)

__version__ = "0.1.0"

# The names below load on first use (PEP 562), so that ``import hqflow.ir`` (the ground floor) or
# ``import hqflow.backends`` loads neither the scheduler nor the planner.
_EXPORTS = {
    "FragmentError": "fragments", "RunFailed": "fragments", "RunResult": "fragments",
    "BudgetExceeded": "jobs", "JobClient": "jobs", "RetriesExhausted": "jobs", "get_client": "jobs",
    "Pipeline": "pipeline",
    "Plan": "planner", "plan": "planner", "run": "planner", "start": "planner",
    "RunHandle": "elastic", "Scheduler": "scheduler", "SchedulerConfig": "scheduler_config",
    "Span": "trace",
}


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


__all__ = sorted([*_EXPORTS, "__version__"])
