"""Show a graph: as text (``print(graph)``), as a networkx ``DiGraph``, as a PNG."""
from __future__ import annotations

from .graph import KINDS, Graph

_COLORS = {"cpu": "#8ecae6", "gpu": "#b5e48c", "qpu": "#f4a261", "io": "#dddddd"}


def _describe(f) -> str:
    if f.kind == "execute" and f.circuit is not None:
        c = f.circuit
        mode = f"{c.shots} shots" if c.shots else "exact"
        grad = f", gradient={f.gradient}" if f.gradient else ""
        return (
            f"backend={f.backend}, circuit {c.name!r} {c.n_qubits}q/{len(c.ops)} ops, "
            f"{c.n_inputs} inputs, {c.n_weights} weights, {c.n_observables} observables, {mode}{grad}"
        )
    params = f" params={f.kwargs}" if f.params else ""
    return f"fn={f.fn}{params}"


def to_text(graph: Graph) -> str:
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


def to_networkx(graph: Graph):
    """A ``networkx.MultiDiGraph``: one node per fragment plus ``input:NAME``/``output:NAME``."""
    import networkx as nx

    g = nx.MultiDiGraph(name=graph.name)
    for p in graph.inputs:
        g.add_node(f"input:{p.name}", kind="input", resource="io", type=p.type)
    for p in graph.outputs:
        g.add_node(f"output:{p.name}", kind="output", resource="io", type=p.type)
    for f in graph.fragments:
        g.add_node(f.name, kind=f.kind, resource=f.resource, fn=f.fn, backend=f.backend)
    for e in graph.edges:
        src = e.src[0] if e.src[0] else f"input:{e.src[1]}"
        dst = e.dst[0] if e.dst[0] else f"output:{e.dst[1]}"
        g.add_edge(src, dst, src_port=e.src[1], dst_port=e.dst[1], loop=e.loop, max_staleness=e.max_staleness)
    return g


def draw_png(graph: Graph, path: str) -> str:
    """Lay fragments out left to right by stage; colour by resource; loop edges dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import networkx as nx

    g = to_networkx(graph)
    stage = {k: i + 1 for i, k in enumerate(KINDS)}
    for n, d in g.nodes(data=True):
        d["layer"] = 0 if d["kind"] == "input" else len(KINDS) + 1 if d["kind"] == "output" else stage[d["kind"]]
    pos = nx.multipartite_layout(g, subset_key="layer")
    fig, ax = plt.subplots(figsize=(2.2 * (len(KINDS) + 2), 1.2 + 0.9 * max(3, g.number_of_nodes() // 2)))
    colors = [_COLORS.get(d["resource"], "#cccccc") for _, d in g.nodes(data=True)]
    nx.draw_networkx_nodes(g, pos, node_color=colors, node_size=2600, node_shape="s", ax=ax)
    labels = {n: n if d["kind"] in ("input", "output") else f"{n}\n[{d['kind']}]" for n, d in g.nodes(data=True)}
    nx.draw_networkx_labels(g, pos, labels, font_size=8, ax=ax)
    for loop in (False, True):
        edges = [(u, v) for u, v, d in g.edges(data=True) if d["loop"] == loop]
        nx.draw_networkx_edges(
            g, pos, edgelist=edges, ax=ax, node_size=2600, arrowsize=14,
            style="dashed" if loop else "solid", connectionstyle="arc3,rad=0.25" if loop else "arc3",
        )
    edge_labels = {(u, v): f"{d['src_port']}→{d['dst_port']}" for u, v, d in g.edges(data=True)}
    nx.draw_networkx_edge_labels(g, pos, edge_labels, font_size=7, ax=ax)
    handles = [plt.Line2D([], [], marker="s", ls="", color=c, markersize=10, label=r) for r, c in _COLORS.items()]
    ax.legend(handles=handles, loc="lower right", fontsize=8)
    ax.set_title(f"{graph.name} (dashed: loop-carried)")
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
