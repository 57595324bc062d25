"""hqflow: a runtime for hybrid classical/quantum programs.

    import hqflow as hq
    pipe = hq.Pipeline("demo")          # build a graph of fragments
    graph = pipe.build()                 # plain data: print / to_json / draw
    result = hq.run(graph, stream)       # run it (synchronous reference executor)
"""
import os as _os

# In a source checkout, ir/, backends/ and workloads/ sit beside this folder and
# are installed as hqflow.ir, hqflow.backends and hqflow.workloads. When Python
# imports hqflow from the checkout itself (e.g. ``python -c`` at the repo root),
# let the package find them there too. Installed copies have them inside.
_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if _os.path.isfile(_os.path.join(_root, "pyproject.toml")) and _os.path.isdir(_os.path.join(_root, "ir")):
    __path__.append(_root)  # noqa: F821 - __path__ is defined for packages

__version__ = "0.1.0"

from .executor import FragmentError, RunResult, SyncExecutor, run  # noqa: E402
from .pipeline import Pipeline  # noqa: E402
from .trace import Span  # noqa: E402

__all__ = ["FragmentError", "Pipeline", "RunResult", "Span", "SyncExecutor", "run", "__version__"]
