"""The reference executor: one fragment at a time, in graph order.

``run(graph, stream)`` runs every fragment of the graph once per stream item
(a dict of graph-input values; an ``int`` means that many steps of a graph
without inputs). Loop-carried edges hand step ``t``'s value to step ``t + 1``
(``init`` before step 0). It returns the graph outputs of every step, the timed
spans, and the final loop-carried values. It is the semantics the overlap
scheduler must reproduce exactly when it runs synchronously.
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from hqflow.backends import Backend, get_backend
from hqflow.ir.graph import Fragment, Graph, GraphError

from .dispatch import Member, Pool
from .fragments import (
    FragmentError,
    RunResult,
    as_port_value,
    call_fragment,
    execute_batch,
    execute_outputs,
    step_seed,
)
from .jobs import JobClient, JobService, Parent
from .trace import Span


def execute_fragment(f: Fragment, args: Mapping[str, Any], backend: Backend, seed: int | None) -> dict[str, Any]:
    """Run an ``execute`` fragment as one job (with all parameter-shift rows when asked), blocking."""
    batch, post = execute_batch(f, args, seed)
    return execute_outputs(f, backend.submit(batch).result(), post)


class ReferenceExecutor:
    """Runs a validated graph step by step on this thread. Backends are made once per run."""

    def __init__(self, graph: Graph, backends: Mapping[str, Backend] | None = None):
        self.backends: dict[str, Backend] = dict(backends or {})
        for f in graph.fragments:
            used = (f.backend,) if f.kind == "execute" and f.backend else tuple(f.job_backends)
            for name in used:
                if name not in self.backends:
                    self.backends[name] = get_backend(name)
        self.graph = graph.validate(backends={k: b.capabilities for k, b in self.backends.items()})
        self.order = graph.topological_order()

    def resource(self, f: Fragment) -> str:
        return f"qpu:{f.backend}" if f.kind == "execute" else f.resource

    def initial_state(self, overrides: Mapping[str, Any] | None) -> dict[int, Any]:
        """Values on the loop-carried edges (by edge index) before step 0.

        ``overrides`` maps a loop source ``"fragment.port"`` to a value that
        replaces the ``init`` of every loop edge leaving that port.
        """
        overrides = dict(overrides or {})
        state, used = {}, set()
        for i, e in enumerate(self.graph.edges):
            if not e.loop:
                continue
            key = f"{e.src[0]}.{e.src[1]}"
            value = overrides[key] if key in overrides else e.init
            used.add(key)
            if value is None and not (e.start_empty and key not in overrides):
                raise GraphError(f"loop-carried edge {e} has no initial value; give init= or initial_state={{{key!r}: ...}}")
            state[i] = as_port_value(value, self.graph.fragment(e.dst[0]).port(e.dst[1], output=False).type)
        unknown = sorted(set(overrides) - used)
        if unknown:
            raise GraphError(f"initial_state names {unknown}, which are not loop-carried sources")
        return state

    def run_step(self, step: int, item: Mapping[str, Any], state: dict[int, Any], seed: int | None,
                 t0: float, spans: list[Span]) -> dict[str, Any]:
        g = self.graph
        values: dict[tuple[str | None, str], Any] = {(None, k): v for k, v in item.items()}
        incoming = {e.dst: i for i, e in enumerate(g.edges)}
        for index, f in enumerate(self.order):
            args = {}
            for p in f.inputs:
                i = incoming[(f.name, p.name)]
                args[p.name] = state[i] if g.edges[i].loop else values[g.edges[i].src]
            start = time.perf_counter() - t0
            try:
                if f.kind == "execute":
                    try:
                        out = execute_fragment(f, args, self.backends[f.backend], step_seed(seed, step, index))
                    except Exception as exc:
                        raise FragmentError(f"fragment {f.name!r} on backend {f.backend!r}: {exc}") from exc
                else:
                    out = call_fragment(f, args, self._client(f, step, t0, spans))
            except Exception as exc:
                spans.append(Span(f.name, f.kind, self.resource(f), step, start, time.perf_counter() - t0, f"error: {exc}"))
                raise
            spans.append(Span(f.name, f.kind, self.resource(f), step, start, time.perf_counter() - t0))
            values.update({(f.name, k): v for k, v in out.items()})
        for i in state:
            state[i] = values[g.edges[i].src]
        return {p.name: values[g.edges[incoming[(None, p.name)]].src] for p in g.outputs}

    def _client(self, f: Fragment, step: int, t0: float, spans: list[Span]) -> JobClient | None:
        """A classical fragment's job client: its declared backends, each a pool of one, no retries."""
        if not f.job_backends:
            return None
        pools = {name: Pool(name, [Member(self.backends[name], f"qpu:{self.backends[name].name}", 1, 1)])
                 for name in f.job_backends}
        service = JobService(pools, max_retries=0, t0=t0, record=spans.append)
        return JobClient(service, f.job_backends, Parent(f.name, step, self.resource(f), None, True, f.kind, self.resource(f)))

    def run(self, stream: Iterable[Mapping[str, Any]] | int, *, initial_state: Mapping[str, Any] | None = None,
            seed: int | None = 0, progress=None) -> RunResult:
        """Run every step of ``stream``; ``progress(steps_done, outputs)`` is called after each."""
        g = self.graph
        if isinstance(stream, int):
            if stream < 0:
                raise ValueError(f"number of steps must be >= 0, got {stream}")
            stream = ({} for _ in range(stream))
        state = self.initial_state(initial_state)
        expected = {p.name for p in g.inputs}
        spans: list[Span] = []
        outputs = []
        t0 = time.perf_counter()
        for step, item in enumerate(stream):
            if set(item) != expected:
                raise GraphError(f"step {step}: stream items must have keys {sorted(expected)}, got {sorted(item)}")
            outputs.append(self.run_step(step, item, state, seed, t0, spans))
            if progress is not None:
                progress(step + 1, outputs[-1])
        final = {f"{g.edges[i].src[0]}.{g.edges[i].src[1]}": v for i, v in state.items()}
        return RunResult(outputs, spans, final, time.perf_counter() - t0)


def run(graph: Graph, stream: Iterable[Mapping[str, Any]] | int, *, backends: Mapping[str, Backend] | None = None,
        initial_state: Mapping[str, Any] | None = None, seed: int | None = 0, progress=None) -> RunResult:
    """Run ``graph`` synchronously over ``stream``; see the module docstring."""
    return ReferenceExecutor(graph, backends).run(stream, initial_state=initial_state, seed=seed, progress=progress)
