"""``hqflow trace``: where a run spent its time (the utilization table, trace.json and gantt.png)."""
from __future__ import annotations

import os

from hqflow.ir.text import one_line

from .pool import UsageError, make_folder


def cmd_trace(args) -> int:
    from hqflow.trace import TraceError, format_table, load_spans
    from hqflow.trace.export import draw_gantt, write_chrome_trace

    path = os.path.join(args.run, "spans.json") if os.path.isdir(args.run) else args.run
    if not os.path.exists(path):
        what = "run directory has no spans.json" if os.path.isdir(args.run) else "no such run directory or file"
        raise UsageError(f"{args.run}: {what}")
    try:
        spans, meta = load_spans(path)
    except TraceError as exc:
        raise UsageError(str(exc)) from None
    out = args.out or os.path.dirname(os.path.abspath(path))
    make_folder(out, "")
    print(format_table(spans))
    title = meta.get("workload") or os.path.basename(os.path.dirname(os.path.abspath(path)))
    print(f"wrote {one_line(write_chrome_trace(os.path.join(out, 'trace.json'), spans, meta))}")
    print(f"wrote {one_line(draw_gantt(spans, os.path.join(out, 'gantt.png'), title=one_line(str(title))))}")
    return 0
