"""hqflow: a runtime for hybrid classical/quantum programs.

    import hqflow as hq
    pipe = hq.Pipeline("demo")          # build a graph of fragments
    graph = pipe.build()                 # plain data: print / to_json / draw
    result = hq.run(graph, stream)       # run it (overlap scheduler; executor="sync" | "local" | "ray")
    best = hq.plan(graph, steps, profile)  # or let the cost model choose the knobs; hq.run(..., plan=best)
"""
import os as _os

# In a source checkout, ir/, backends/ and workloads/ sit beside this folder and
# are installed as hqflow.ir, hqflow.backends and hqflow.workloads. When Python
# imports hqflow from the checkout itself (e.g. ``python -c`` at the repo root),
# let the package find them there too. Installed copies have them inside.
_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isfile(_os.path.join(_root, "pyproject.toml")) and _os.path.isdir(_os.path.join(_root, "ir")):
    __path__.append(_root)

__version__ = "0.1.0"

from .fragments import FragmentError, RunFailed, RunResult
from .jobs import BudgetExceeded, JobClient, RetriesExhausted, get_client
from .pipeline import Pipeline
from .reference_executor import ReferenceExecutor
from .reference_executor import run as run_reference
from .planner import Plan, plan, run, start
from .scheduler import RunHandle, Scheduler, SchedulerConfig
from .trace import Span

__all__ = [
    "FragmentError",
    "JobClient",
    "Pipeline",
    "Plan",
    "ReferenceExecutor",
    "RetriesExhausted",
    "BudgetExceeded",
    "RunFailed",
    "RunHandle",
    "RunResult",
    "Scheduler",
    "SchedulerConfig",
    "Span",
    "__version__",
    "get_client",
    "plan",
    "run",
    "run_reference",
    "start",
]
