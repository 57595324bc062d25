"""Show a graph: as text (``print(graph)``), as a networkx ``DiGraph``, as a PNG.

A graph is read, not imported (``GraphLike``; ``hqflow.ir.graph`` imports this module).
"""
from __future__ import annotations

from .nodes import KINDS, CircuitCall, Classical, GraphLike

_COLORS = {"cpu": "#8ecae6", "gpu": "#b5e48c", "qpu": "#f4a261", "io": "#dddddd"}


def _describe(f) -> str:
    if isinstance(f, CircuitCall):
        c = f.circuit
        if c is None:
            return f"backend={f.backend}, no circuit"
        mode = f"{c.shots} shots" if c.shots else "exact"
        grad = f", gradient={f.gradient}" if f.gradient else ""
        return (
            f"backend={f.backend}, circuit {c.name!r} {c.n_qubits}q/{len(c.ops)} ops, "
            f"{c.n_inputs} inputs, {c.n_weights} weights, {c.n_observables} observables, {mode}{grad}"
        )
    params = f" params={dict(f.params)}" if f.params else ""  # as held: drawing imports nothing
    jobs = f" jobs->{','.join(f.job_backends)}" if f.job_backends else ""
    return f"fn={f.fn}{params}{jobs}"


def to_text(graph: GraphLike) -> str:
    n_loop = len(graph.loop_edges)
    lines = [f"Graph {graph.name!r}: {len(graph.fragments)} fragments, {len(graph.edges)} edges ({n_loop} loop-carried)"]
    if graph.inputs:
        lines.append("  inputs:  " + ", ".join(map(str, graph.inputs)))
    if graph.outputs:
        lines.append("  outputs: " + ", ".join(map(str, graph.outputs)))
    width = max((len(f.name) for f in graph.fragments), default=0)
    for f in graph.fragments:
        ins = ", ".join(map(str, f.inputs))
        outs = ", ".join(map(str, f.outputs))
        lines.append(f"  [{f.kind:<11}] {f.name:<{width}} @{f.resource}  ({ins}) -> ({outs})")
        lines.append(f"  {'':13} {'':<{width}}  {_describe(f)}")
    lines.append("  edges:")
    lines += [f"    {e}" for e in graph.edges]
    return "\n".join(lines)


def to_networkx(graph: GraphLike):
    """A ``networkx.MultiDiGraph``: one node per fragment plus ``input:NAME``/``output:NAME``."""
    import networkx as nx

    g = nx.MultiDiGraph(name=graph.name)
    for p in graph.inputs:
        g.add_node(f"input:{p.name}", kind="input", resource="io", type=p.type)
    for p in graph.outputs:
        g.add_node(f"output:{p.name}", kind="output", resource="io", type=p.type)
    for f in graph.fragments:
        work, call = isinstance(f, Classical), isinstance(f, CircuitCall)
        g.add_node(f.name, kind=f.kind, resource=f.resource, fn=f.fn if work else None,
                   backend=f.backend if call else None, job_backends=list(f.job_backends) if work else [])
    for e in graph.edges:
        src = e.src[0] if e.src[0] else f"input:{e.src[1]}"
        dst = e.dst[0] if e.dst[0] else f"output:{e.dst[1]}"
        g.add_edge(src, dst, src_port=e.src[1], dst_port=e.dst[1], loop=e.loop, max_staleness=e.max_staleness)
    return g


def draw_png(graph: GraphLike, path: str) -> str:
    """Columns by stage (inputs, the five kinds, outputs), colour by resource.

    Edges between the same two nodes are merged into one arrow listing their
    ports; loop-carried edges are dashed; a fragment's loops onto itself are
    listed inside its box (``↻ port``).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    g = to_networkx(graph)
    stage = {k: i + 1 for i, k in enumerate(KINDS)}
    layer = {n: 0 if d["kind"] == "input" else len(KINDS) + 1 if d["kind"] == "output" else stage[d["kind"]]
             for n, d in g.nodes(data=True)}
    used = sorted(set(layer.values()))
    column = {lay: i for i, lay in enumerate(used)}
    members: dict[int, list] = {}
    for n in g.nodes:
        members.setdefault(layer[n], []).append(n)
    pos = {n: (2.6 * column[lay], -1.5 * (i - (len(ns) - 1) / 2)) for lay, ns in members.items() for i, n in enumerate(ns)}
    tall = max(len(ns) for ns in members.values())
    fig, ax = plt.subplots(figsize=(2.4 * len(used) + 1, 1.4 * tall + 1.6))

    merged: dict[tuple, list] = {}
    for u, v, d in g.edges(data=True):
        merged.setdefault((u, v, d["loop"]), []).append(d["src_port"] if d["src_port"] == d["dst_port"] else f"{d['src_port']}→{d['dst_port']}")
    self_loops = {u: ports for (u, v, _), ports in merged.items() if u == v}
    for (u, v, loop), ports in merged.items():
        if u == v:
            continue
        (x0, y0), (x1, y1) = pos[u], pos[v]
        rad = (-0.35 if x1 <= x0 else 0.25) if loop else 0.0
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0), arrowprops=dict(
            arrowstyle="-|>", lw=1.1, color="#555555", shrinkA=34, shrinkB=34,
            linestyle="--" if loop else "-", connectionstyle=f"arc3,rad={rad}"))
        mx, my = (x0 + x1) / 2, (y0 + y1) / 2 + (0.45 * abs(x1 - x0) / 2.6 if loop and x1 <= x0 else 0)
        ax.text(mx, my + 0.12, "\n".join(ports), fontsize=7, ha="center", va="bottom", color="#333333")
    for n, d in g.nodes(data=True):
        x, y = pos[n]
        text = n.split(":", 1)[1] if d["kind"] in ("input", "output") else f"{n}\n[{d['kind']}]"
        if n in self_loops:
            text += "\n↻ " + ", ".join(self_loops[n])
        ax.add_patch(FancyBboxPatch((x - 0.8, y - 0.45), 1.6, 0.9, boxstyle="round,pad=0.05",
                                    fc=_COLORS.get(d["resource"], "#cccccc"), ec="#444444", lw=0.8))
        ax.text(x, y, text, ha="center", va="center", fontsize=8)
    xs, ys = [p[0] for p in pos.values()], [p[1] for p in pos.values()]
    ax.set_xlim(min(xs) - 1.2, max(xs) + 1.2)
    ax.set_ylim(min(ys) - 1.3, max(ys) + 1.3)
    handles = [plt.Line2D([], [], marker="s", ls="", color=c, markersize=10, label=r) for r, c in _COLORS.items()]
    ax.legend(handles=handles, loc="lower right", fontsize=7, ncol=4, frameon=False)
    ax.set_title(f"{graph.name}   (dashed: loop-carried)", fontsize=10)
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
