"""Fixtures of the hqflow tests: ``plain_loop``, the semantics the scheduler must reproduce.

(A fixture rather than a module to import: under ``--import-mode=importlib`` a test file cannot
import a helper module beside it.)
"""
import numpy as np
import pytest

from hqflow.backends import CircuitBatch
from hqflow.gradients import param_shift
from hqflow.ir.graph import resolve_fn


def run_plain_loop(graph, stream, backends, *, seed=0, initial_state=None):
    """Every fragment once per stream item, one at a time, in ``graph.topological_order()``, on this thread.

    A loop-carried edge hands step ``t``'s value to step ``t + 1`` (its ``init``, or
    ``initial_state["fragment.port"]``, before step 0); every loop edge must have ``max_staleness=0``.
    An ``execute`` fragment is one blocking job on ``backends[f.backend]`` (a backend instance), all
    parameter-shift rows in it, with shot seed ``SeedSequence([seed, step, topological index])``.
    Returns ``(outputs, state)``: the graph outputs of every step, and each loop source's last value.
    """
    order = graph.topological_order()
    loops = {i: e for i, e in enumerate(graph.edges) if e.loop}
    assert all(e.max_staleness == 0 for e in loops.values()), "the plain loop has staleness 0 only"
    into = {e.dst: i for i, e in enumerate(graph.edges)}
    carried = {}
    for i, e in loops.items():
        value = dict(initial_state or {}).get(f"{e.src[0]}.{e.src[1]}", e.init)
        if isinstance(value, list) and graph.fragment(e.dst[0]).port(e.dst[1], output=False).type in ("array", "any"):
            value = np.asarray(value, dtype=float)  # a JSON init reaches an array port as an array
        carried[i] = value
    outputs = []
    for step, item in enumerate(stream):
        values = {(None, name): v for name, v in item.items()}
        for index, f in enumerate(order):
            args = {}
            for p in f.inputs:
                i = into[(f.name, p.name)]
                args[p.name] = carried[i] if i in loops else values[graph.edges[i].src]
            names = [p.name for p in f.outputs]
            if f.kind == "execute":
                shot_seed = int(np.random.SeedSequence([seed, step, index]).generate_state(1)[0])
                inputs, weights = args.get("inputs"), args.get("weights")
                if f.gradient == "param-shift":
                    batch, post = param_shift(f.circuit, inputs, weights, seed=shot_seed)
                    g = post(backends[f.backend].submit(batch).result())
                    out = {"values": g.values, "jacobian": g.jacobian, "stderr": g.stderr}
                else:
                    batch = CircuitBatch.make(f.circuit, inputs, weights, seed=shot_seed)
                    r = backends[f.backend].submit(batch).result()
                    out = {"values": r.values, "stderr": r.stderr, "probs": r.probs, "counts": r.counts}
                out = {n: out[n] for n in names}
            else:
                assert not getattr(f, "job_backends", ()), "the plain loop gives fragments no job client"
                result = resolve_fn(f.fn)(**args, **f.kwargs)
                if not names:
                    out = {}
                elif isinstance(result, dict) and set(result) == set(names):
                    out = result
                elif len(names) == 1 and not isinstance(result, dict):
                    out = {names[0]: result}
                else:
                    assert isinstance(result, tuple) and len(result) == len(names), result
                    out = dict(zip(names, result))
            values.update({(f.name, n): v for n, v in out.items()})
        for i in carried:
            carried[i] = values[graph.edges[i].src]
        outputs.append({p.name: values[graph.edges[into[(None, p.name)]].src] for p in graph.outputs})
    state = {f"{e.src[0]}.{e.src[1]}": carried[i] for i, e in loops.items()}
    return outputs, state


@pytest.fixture
def plain_loop():
    """``plain_loop(graph, stream, backends, seed=0, initial_state=None) -> (outputs, state)``: see
    ``run_plain_loop``."""
    return run_plain_loop
