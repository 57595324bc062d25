"""Show a run's spans as a Chrome trace (open it in https://ui.perfetto.dev) or as a Gantt PNG: both draw
one row per lane (``Span.row``) in the order of :func:`hqflow.trace.rows`, classical lanes first."""
from __future__ import annotations

from ..common.lanes import Lane
from . import Span, lane_utilization, makespan, overlap_fraction, rows, write_json_atomic

KIND_COLORS = {"preprocess": "#8ecae6", "prepare": "#219ebc", "execute": "#f4a261",
               "postprocess": "#90be6d", "learn": "#b388eb"}
_OTHER_COLOR = "#bbbbbb"
_FAILED_EDGE = "#d00000"


def to_chrome_trace(spans: list[Span], meta: dict | None = None) -> dict:
    """The spans in the Chrome Trace Event format (JSON object form).

    One process (``pid`` 1, named ``hqflow``); one thread per lane, named after it and ordered with
    ``thread_sort_index``; one ``"X"`` (complete) event per span with ``ts``/``dur`` in microseconds since
    the run began, ``name`` the fragment, ``cat`` its kind, and the step, parameter version, outcome,
    resource and the job's figures in ``args``. ``meta`` goes to ``otherData``.
    """
    order = rows(spans)
    tid = {row: i + 1 for i, (row, _) in enumerate(order)}
    events: list[dict] = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "hqflow"}}]
    for row, _ in order:
        events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": tid[row], "args": {"name": str(row)}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": tid[row],
                       "args": {"sort_index": tid[row]}})
    for s in sorted(spans, key=lambda s: (s.start, tid[s.row])):
        events.append({
            "ph": "X", "name": s.fragment, "cat": s.kind, "pid": 1, "tid": tid[s.row],
            "ts": round(s.start * 1e6, 3), "dur": round(s.seconds * 1e6, 3),
            "args": {"step": s.step, "version": s.version, "outcome": str(s.outcome), "resource": str(s.resource),
                     **{k: getattr(s, k) for k in ("cost", "node", "rows", "shots", "queued", "device", "service_jobs")
                        if getattr(s, k) not in (None, "")}},
        })
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": dict(meta or {})}


def write_chrome_trace(path: str, spans: list[Span], meta: dict | None = None) -> str:
    """Write :func:`to_chrome_trace` to ``path`` (atomically); returns ``path``."""
    write_json_atomic(path, to_chrome_trace(spans, meta))
    return path


def draw_gantt(spans: list[Span], path: str, title: str | None = None,
               marks: list[tuple[float, str]] = ()) -> str:
    """Draw the spans as a Gantt chart PNG; returns ``path``.

    One row per lane with its utilization on the right; bars coloured by fragment kind and labelled
    with their step where there is room; spans that did not end ``ok`` hatched with a red outline.
    ``marks``: ``(time, label)`` events (a resource change, say) on the spans' clock, drawn as labelled
    vertical lines.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    order = rows(spans)
    y = {row: i for i, (row, _) in enumerate(order)}
    util = lane_utilization(spans)
    t0 = min((s.start for s in spans), default=0.0)
    total = makespan(spans) or 1.0
    width_in = 13.0
    fig, ax = plt.subplots(figsize=(width_in, 1.6 + 0.42 * max(len(order), 1)))

    bars: dict[tuple[Lane, str, bool], list[tuple[float, float]]] = {}  # one artist per (row, kind, failed)
    for s in spans:
        bars.setdefault((s.row, s.kind, not s.outcome.ok), []).append((s.start - t0, s.seconds))
        if s.seconds / total * width_in > 0.22:  # room for the step number
            ax.text(s.start - t0 + s.seconds / 2, y[s.row], str(s.step), ha="center", va="center", fontsize=6)
    for (row, kind, failed), xranges in bars.items():
        ax.broken_barh(xranges, (y[row] - 0.38, 0.76), facecolor=KIND_COLORS.get(kind, _OTHER_COLOR),
                       edgecolor=_FAILED_EDGE if failed else "#333333",
                       linewidth=1.0 if failed else 0.3, hatch="////" if failed else None)

    ax.set_ylim(max(len(order), 1) - 0.5, -0.5)
    ax.set_yticks(range(len(order)), [str(row) for row, _ in order], fontsize=8)
    right = ax.twinx()
    right.set_ylim(ax.get_ylim())
    right.set_yticks(range(len(order)), [f"{100 * util[row]:.0f}%" for row, _ in order], fontsize=8)
    right.set_ylabel("busy", fontsize=8)
    ax.set_xlim(0, total * 1.01)
    ax.set_xlabel("seconds since run start")
    ax.grid(axis="x", color="#dddddd", lw=0.6)
    ax.set_axisbelow(True)
    for at, label in marks:
        ax.axvline(at - t0, color="#c0392b", lw=1.2, ls=":")
        ax.text(at - t0, -0.45, f" {label}", color="#c0392b", fontsize=8, va="top", ha="left",
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})
    classical = sum(1 for _, r in order if not r.quantum)
    if 0 < classical < len(order):
        ax.axhline(classical - 0.5, color="#888888", lw=0.8, ls="--")

    kinds = sorted({s.kind for s in spans}, key=lambda k: (list(KIND_COLORS) + [k]).index(k))
    handles = [Patch(facecolor=KIND_COLORS.get(k, _OTHER_COLOR), edgecolor="#333333", label=k) for k in kinds]
    if any(not s.outcome.ok for s in spans):
        handles.append(Patch(facecolor="white", edgecolor=_FAILED_EDGE, hatch="////", label="failed / timeout"))
    if handles:
        ax.legend(handles=handles, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=len(handles),
                  fontsize=8, frameon=False)
    ax.set_title(f"{title or 'hqflow run'}\nmakespan {makespan(spans):.3f} s, {len(spans)} spans, "
                 f"classical/quantum overlap {100 * overlap_fraction(spans):.0f}%", fontsize=10, loc="left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
