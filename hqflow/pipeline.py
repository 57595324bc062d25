"""``Pipeline``: build a graph in a few lines, with one decorator per fragment kind.

    pipe = Pipeline("classifier")
    pipe.input("x", "array")

    @pipe.prepare(outputs={"angles": "array"})
    def encode(x):
        return np.pi * x

    pipe.execute("circuit", template, backend="reference", gradient="param-shift")
    pipe.connect("encode.angles", "circuit.inputs")

    @pipe.learn(outputs=("weights", "loss"), params={"lr": 0.1})
    def step(values, jacobian, weights, lr): ...

    pipe.loop("step.weights", "circuit.weights", init=np.zeros(4))
    pipe.output("step.loss", "loss")
    graph = pipe.build()

The decorators add ``Classical`` fragments and ``execute`` adds a ``CircuitCall`` (``hqflow.ir.nodes``).
A decorated function's parameters are its input ports, except the names in ``params`` and parameters
with a default value (which keep it unless named in ``inputs=``). An input port left unconnected is
wired to the graph input of the same name, or else to the one earlier fragment with an output of that
name; loop-carried edges are always declared with ``loop``. A classical fragment that submits circuit
jobs itself names the backends it uses (``job_backends="qpu"``) and gets them from
``hqflow.get_client()`` at run time. The graph is what these calls say, and ``print(graph)`` shows it.
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from hqflow.backends import DEFAULT_BACKEND
from hqflow.ir.circuit import CircuitTemplate
from hqflow.ir.graph import (
    CircuitCall,
    Classical,
    Edge,
    Fragment,
    Graph,
    GraphError,
    Port,
    execute_ports,
    fn_ref,
    json_constant,
)

def _ports(spec: Any) -> tuple[Port, ...]:
    """Ports from None, a name, names, or a mapping of names to types."""
    spec = [spec] if isinstance(spec, str) else spec or ()
    return tuple(Port(k, v) for k, v in spec.items()) if isinstance(spec, Mapping) else tuple(map(Port, spec))


def _split(ref: str) -> tuple[str | None, str]:
    frag, sep, port = ref.rpartition(".")
    if not sep or not port:
        raise GraphError(f"{ref!r} is not of the form 'fragment.port' (or 'input.NAME' / 'output.NAME')")
    return (None if frag in ("input", "output") else frag), port


_NO_INIT = object()  # loop() without init: the value comes from initial_state


def _classical(kind: str, doc: str) -> Callable:
    """The ``Pipeline`` method that adds a decorated function as a ``Classical`` fragment of ``kind``."""

    def method(self, fn=None, *, name=None, outputs=None, inputs=None, resource=None, params=None, job_backends=()):
        def wrap(fn: Callable) -> Callable:
            fname = name or fn.__name__
            consts = {k: json_constant(v, f"param {k!r} of fragment {fname!r}") for k, v in (params or {}).items()}
            types = dict(inputs or {})
            ports = tuple(
                Port(p, types.pop(p, "any"))
                for p, par in inspect.signature(fn).parameters.items()
                if p not in consts
                and par.kind not in (par.VAR_POSITIONAL, par.VAR_KEYWORD)
                and (par.default is par.empty or p in types)
            )
            if types:
                raise GraphError(f"fragment {fname!r}: inputs= names {sorted(types)}, which are not parameters of "
                                 f"{fn.__qualname__}")
            backends = (job_backends,) if isinstance(job_backends, str) else tuple(job_backends or ())
            self.add(Classical(fname, kind, ports, _ports(outputs), resource=resource or "cpu", fn=fn_ref(fn, fname),
                               params=tuple(consts.items()), job_backends=backends))
            return fn

        return wrap(fn) if fn else wrap

    method.__name__, method.__qualname__, method.__doc__ = kind, f"Pipeline.{kind}", doc
    return method


class Pipeline:
    """A mutable graph builder; ``build()`` returns the frozen, validated ``Graph``."""

    def __init__(self, name: str):
        self.name = name
        self._fragments: list[Fragment] = []
        self._edges: list[Edge] = []
        self._inputs: list[Port] = []
        self._outputs: list[Port] = []

    # -- graph inputs and outputs -------------------------------------------------
    def input(self, name: str, type: str = "any") -> Pipeline:
        """Declare a stream field: each stream item supplies a value for ``name``."""
        self._inputs.append(Port(name, type))
        return self

    def output(self, src: str, name: str | None = None, type: str = "any") -> Pipeline:
        """Expose ``"fragment.port"`` as a graph output (named after the port by default)."""
        frag, port = _split(src)
        name = name or port
        self._outputs.append(Port(name, type))
        self._edges.append(Edge((frag, port), (None, name)))
        return self

    # -- edges ------------------------------------------------------------------
    def connect(self, src: str, dst: str) -> Pipeline:
        """Join ``"a.out"`` to ``"b.in"`` (``"input.NAME"`` for a graph input)."""
        self._edges.append(Edge(_split(src), _split(dst)))
        return self

    def loop(self, src: str, dst: str | Iterable[str], init: Any = _NO_INIT, max_staleness: int = 0) -> Pipeline:
        """Loop-carried edge(s): step ``t``'s ``src`` feeds step ``t + 1``'s ``dst`` (one or several).

        ``init`` (JSON data, or an array) is the value before the first step; numeric lists reach
        array ports as numpy arrays; ``init=None`` starts the loop empty (the first step gets None);
        without ``init``, ``hq.run``'s ``initial_state`` must give it. ``max_staleness`` is how many
        versions behind a consumer may run (0: strictly synchronous).
        """
        empty = init is None
        value = None if init is None or init is _NO_INIT else json_constant(init, f"init of loop {src}")
        for d in [dst] if isinstance(dst, str) else dst:
            self._edges.append(Edge(_split(src), _split(d), True, max_staleness, value, empty))
        return self

    # -- fragments --------------------------------------------------------------
    def add(self, fragment: Fragment) -> Fragment:
        self._fragments.append(fragment)
        return fragment

    preprocess = _classical("preprocess", "Decorate a classical preprocessing function (see the module docstring).")
    prepare = _classical("prepare", "Decorate a state-preparation function (turns data into circuit inputs).")
    postprocess = _classical("postprocess", "Decorate a function that reads circuit results.")
    learn = _classical("learn", "Decorate a learner step (usually returns the next weights for a loop edge).")

    def execute(self, name: str, circuit: CircuitTemplate, backend: str = DEFAULT_BACKEND,
                gradient: str | None = None, spsa: tuple[int, float] | None = None) -> CircuitCall:
        """Run ``circuit`` on ``backend`` (default ``compiled``); ports follow from the circuit (``execute_ports``).

        ``gradient``: None, ``"param-shift"`` or ``"spsa"`` (then ``spsa=(samples, epsilon)``, default
        ``(4, 0.1)``: each step's jacobian from that many random directions shared by the step's rows)."""
        if not isinstance(circuit, CircuitTemplate):
            raise GraphError(
                f"fragment {name!r}: circuit must be a CircuitTemplate (use hqflow.ir.from_qiskit / "
                f"from_pennylane / Circuit), got {type(circuit).__name__}"
            )
        ins, outs = execute_ports(circuit, gradient)
        return self.add(CircuitCall(name, "execute", ins, outs, circuit=circuit, backend=backend, gradient=gradient,
                                    spsa=spsa))

    # -- build --------------------------------------------------------------------
    def _autowire(self) -> list[Edge]:
        edges = list(self._edges)
        fed = {e.dst for e in edges}
        graph_inputs = {p.name for p in self._inputs}
        for i, f in enumerate(self._fragments):
            for p in f.inputs:
                if (f.name, p.name) in fed:
                    continue
                if p.name in graph_inputs:
                    edges.append(Edge((None, p.name), (f.name, p.name)))
                    continue
                sources = [g.name for g in self._fragments[:i] if g.port(p.name, output=True)]
                if len(sources) == 1:
                    edges.append(Edge((sources[0], p.name), (f.name, p.name)))
        return edges

    def build(self, validate: bool = True, backends: Mapping[str, Any] | None = None) -> Graph:
        """The frozen graph, validated against ``backends`` (name -> ``Capabilities`` or backend), or
        by default against the backend registry (:func:`registry_backends`)."""
        graph = Graph(self.name, tuple(self._fragments), tuple(self._autowire()), tuple(self._inputs),
                      tuple(self._outputs))
        if not validate:
            return graph
        if backends is not None:  # a backend object stands for its Capabilities (what validate checks)
            from hqflow.backends import as_backend, is_backend

            backends = {k: as_backend(b).capabilities if is_backend(b) else b for k, b in backends.items()}
        return graph.validate(registry_backends(graph) if backends is None else backends)


def registry_backends(graph: Graph) -> dict:
    """What the backend registry says of the backends a graph's execute fragments name, for
    ``graph.validate(backends=...)``: a registered name's ``Capabilities`` (its width is checked),
    None for another name (a pool name bound when the graph runs). A registered backend that
    cannot be made (bad options in its name) is a ``GraphError``."""
    from hqflow.backends import BackendError, registry_capabilities

    names = {f.backend for f in graph.fragments if isinstance(f, CircuitCall)}
    try:
        return registry_capabilities(names)
    except BackendError as exc:
        raise GraphError(str(exc)) from None
