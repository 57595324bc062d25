"""A backend name in a graph is a registered backend or a pool name that hq.run binds."""
import numpy as np
import pytest

import hqflow as hq
from hqflow.ir import Circuit
from hqflow.ir.graph import GraphError


def _graph(backend):
    c = Circuit(1, name="c")
    c.ry(c.inputs("x", 1)[0], 0)
    pipe = hq.Pipeline("pools")
    pipe.input("inputs", "array")
    pipe.execute("run", c.build(observables=["Z0"]), backend=backend)
    pipe.output("run.values")
    return pipe


def test_a_pool_name_builds_and_binds_when_the_graph_runs():
    graph = _graph("qpu").build()  # no backends= needed
    out = hq.run(graph, [{"inputs": np.array([[0.1]])}], backends={"qpu": ["reference", "compiled"]})
    assert out.column("values")[0][0, 0] == pytest.approx(np.cos(0.1))
    with pytest.raises(GraphError, match=r"neither a registered backend .* nor a pool given to the run"):
        hq.run(graph, [{"inputs": np.array([[0.1]])}])


def test_registered_names_are_still_checked_at_build():
    with pytest.raises(GraphError, match="nope"):
        _graph("pennylane:nope").build()
    with pytest.raises(GraphError, match="is not among the backends given"):
        _graph("qpu").build(backends={"other": None})
