"""Span analytics, Chrome-trace export, Gantt chart and spans.json persistence on hand-built spans."""
import dataclasses
import json
import os

import pytest

from hqflow.common.lanes import Lane
from hqflow.common.outcome import OK, TIMEOUT, Outcome
from hqflow.trace import (
    Span,
    TraceError,
    format_table,
    idle,
    intervals_union,
    lane_utilization,
    load_spans,
    makespan,
    overlap_fraction,
    overlap_seconds,
    rows,
    save_spans,
    summary,
    utilization,
)
from hqflow.trace.export import draw_gantt, to_chrome_trace, write_chrome_trace


def cpu(start, end, slot=None, **kw):
    lane = None if slot is None else Lane("cpu", slot=slot)
    return Span("prep", "prepare", Lane("cpu"), kw.pop("step", 0), start, end, lane=lane, **kw)


def qpu(start, end, member=None, **kw):
    lane = None if member is None else Lane("qpu", "emu", member)
    return Span("circ", "execute", Lane("qpu", "emu"), kw.pop("step", 0), start, end, lane=lane, **kw)


def pipelined(steps=4):
    """Two cpu lanes, one gpu lane and two qpu lanes, with a timeout and an error."""
    spans = []
    for t in range(steps):
        a = 1.0 * t
        spans.append(Span("encode", "prepare", Lane("cpu"), t, a, a + 0.5, lane=Lane("cpu", slot=t % 2)))
        outcome = TIMEOUT if t == 1 else Outcome.error("boom") if t == 2 else OK
        spans.append(Span("circ", "execute", Lane("qpu", "emu"), t, a + 0.5, a + 2.0, outcome,
                          lane=Lane("qpu", "emu", t % 2)))
        spans.append(Span("adam", "learn", Lane("gpu"), t, a + 2.0, a + 2.25, version=t, lane=Lane("gpu", slot=0)))
    return spans


def test_makespan():
    assert makespan([]) == 0.0
    assert makespan([cpu(1.0, 2.0), qpu(1.5, 4.0), cpu(3.0, 3.5)]) == pytest.approx(3.0)


def test_utilization_is_the_union_not_the_sum():
    spans = [cpu(0.0, 2.0, 0), cpu(1.0, 3.0, 1), cpu(5.0, 6.0, 0), qpu(0.0, 10.0)]
    assert intervals_union(spans[:3]) == [(0.0, 3.0), (5.0, 6.0)]
    assert utilization(spans) == pytest.approx({"cpu": 0.4, "qpu:emu": 1.0})
    assert idle(spans) == pytest.approx({"cpu": 6.0, "qpu:emu": 0.0})
    assert lane_utilization(spans) == pytest.approx({"cpu/0": 0.3, "cpu/1": 0.2, "qpu:emu": 1.0})


@pytest.mark.parametrize("spans, seconds, fraction", [
    ([cpu(0, 1), qpu(1, 3), cpu(3, 4)], 0.0, 0.0),                  # strictly sequential
    ([cpu(0, 4), qpu(1, 3)], 2.0, 1.0),                             # quantum hidden behind classical
    ([cpu(0, 2), Span("a", "learn", Lane("gpu"), 0, 1, 3), qpu(2.5, 5)], 0.5, 0.5 / 2.5),
    ([cpu(0, 3), qpu(1, 2, 0), qpu(1.5, 4, 1)], 2.0, 2.0 / 3.0),
    ([cpu(0, 1)], 0.0, 0.0),                                        # no quantum work
])
def test_overlap(spans, seconds, fraction):
    assert overlap_seconds(spans) == pytest.approx(seconds)
    assert overlap_fraction(spans) == pytest.approx(fraction)


def test_summary_counts_outcomes_and_orders_lanes():
    spans = pipelined()
    s = summary(spans)
    assert s["spans"] == 12 and s["makespan"] == pytest.approx(5.25)
    assert s["outcomes"] == {"ok": 10, "timeout": 1, "error": 1}
    assert list(s["resources"]) == ["cpu", "gpu", "qpu:emu"]
    assert list(s["lanes"]) == ["cpu/0", "cpu/1", "gpu/0", "qpu:emu#0", "qpu:emu#1"]
    assert s["resources"]["cpu"]["busy"] == pytest.approx(2.0)
    assert s["resources"]["qpu:emu"]["busy"] == pytest.approx(4.5)  # 0.5..5.0 without a gap
    assert s["lanes"]["qpu:emu#0"]["utilization"] == pytest.approx(3.0 / 5.25)
    json.dumps(s)
    table = format_table(spans)
    assert "makespan" in table and "overlap" in table and "  qpu:emu#1" in table
    assert "10 ok, 1 error, 1 timeout" in table
    assert format_table([]) == "no spans"


def test_rows_put_classical_lanes_first_in_natural_order():
    spans = [qpu(0, 1, 0), cpu(0, 1, 10), Span("a", "learn", Lane("gpu"), 0, 0, 1), cpu(0, 1, 2)]
    assert [row for row, _ in rows(spans)] == ["cpu/2", "cpu/10", "gpu", "qpu:emu#0"]


def test_chrome_trace():
    spans = pipelined()
    doc = json.loads(json.dumps(to_chrome_trace(spans, {"workload": "demo"})))
    assert doc["otherData"] == {"workload": "demo"}
    events = doc["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert len(complete) == len(spans)
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    order = {e["tid"]: e["args"]["sort_index"] for e in events if e["ph"] == "M" and e["name"] == "thread_sort_index"}
    assert sorted(names.values()) == sorted({s.row for s in spans})  # one thread per lane
    assert [names[t] for t in sorted(order, key=order.get)] == ["cpu/0", "cpu/1", "gpu/0", "qpu:emu#0", "qpu:emu#1"]
    by_key = {(s.fragment, s.step): s for s in spans}
    for e in complete:
        s = by_key[(e["name"], e["args"]["step"])]
        assert e["ts"] == pytest.approx(s.start * 1e6) and e["dur"] == pytest.approx(s.seconds * 1e6)
        assert e["cat"] == s.kind and names[e["tid"]] == s.row and e["pid"] == 1
        assert e["args"]["outcome"] == s.outcome and e["args"]["version"] == s.version


def test_write_chrome_trace(tmp_path):
    path = write_chrome_trace(str(tmp_path / "trace.json"), pipelined())
    assert len([e for e in json.loads(open(path).read())["traceEvents"] if e["ph"] == "X"]) == 12


def test_gantt_png(tmp_path):
    spans = pipelined(50)
    path = draw_gantt(spans, str(tmp_path / "gantt.png"), title="demo")
    with open(path, "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.path.getsize(path) > 10_000
    assert os.path.getsize(draw_gantt([], str(tmp_path / "empty.png"))) > 1000


def test_save_load_round_trip(tmp_path):
    spans = pipelined()
    spans[0] = dataclasses.replace(spans[0], node="a1b2c3d4")  # the Ray node it ran on
    path = str(tmp_path / "run" / "spans.json")
    save_spans(path, spans, {"workload": "demo", "steps": 4})
    assert load_spans(path) == (spans, {"workload": "demo", "steps": 4})
    assert os.listdir(tmp_path / "run") == ["spans.json"]  # no temporary file left behind
    assert json.loads(open(path).read())["format"] == "hqflow.spans"


def _doc(**change):
    doc = {"format": "hqflow.spans", "version": 1, "meta": {}, "spans": [cpu(0, 1).to_dict()]}
    doc.update(change)
    return doc


@pytest.mark.parametrize("content, message", [
    (None, "cannot read"),
    ("{not json", "not valid JSON"),
    (json.dumps([1, 2]), "not an hqflow.spans file"),
    (json.dumps(_doc(format="other")), "not an hqflow.spans file"),
    (json.dumps(_doc(version=99)), "unsupported hqflow.spans version 99"),
    (json.dumps(_doc(spans={})), '"spans" must be a list'),
    (json.dumps(_doc(spans=[{"fragment": "a"}])), "span 0: missing field 'kind'"),
    (json.dumps(_doc(spans=[{**cpu(0, 1).to_dict(), "colour": 1}])), "span 0: unknown field 'colour'"),
    (json.dumps(_doc(spans=[{**cpu(0, 1).to_dict(), "start": "0"}])), "span 0: field 'start' has the wrong type"),
    (json.dumps(_doc(spans=[cpu(0, 1).to_dict(), {**cpu(0, 1).to_dict(), "end": -1}])), "span 1: ends"),
])
def test_load_errors(tmp_path, content, message):
    path = tmp_path / "spans.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(TraceError, match=message) as exc:
        load_spans(str(path))
    assert isinstance(exc.value, ValueError) and "\n" not in str(exc.value)


def test_spend_counts_service_jobs_not_batches(tmp_path):
    """22.24: a cloud batch of 35 rows x 5 groups is 175 service jobs; the table said "over 3 priced jobs"."""
    spans = [qpu(0, 1, cost=10.0, service_jobs=85), qpu(1, 2, cost=10.0, service_jobs=85),
             qpu(2, 3, cost=0.5, service_jobs=5), qpu(3, 4), cpu(4, 5)]
    assert "spend     20.5000 over 175 priced service jobs in 3 batches" in format_table(spans)
    path = str(tmp_path / "spans.json")
    save_spans(path, spans)
    assert load_spans(path)[0] == spans and json.loads(open(path).read())["version"] == 6
    doc = json.loads(open(path).read())  # a version 4 file: no service_jobs; each priced job counts once
    doc["version"] = 4
    for d in doc["spans"]:
        d.pop("service_jobs")
    path4 = tmp_path / "v4.json"
    path4.write_text(json.dumps(doc))
    old, _ = load_spans(str(path4))
    assert "over 3 priced service jobs in 3 batches" in format_table(old)
    events = [e for e in to_chrome_trace(spans)["traceEvents"] if e["ph"] == "X"]
    assert [e["args"].get("service_jobs") for e in events] == [85, 85, 5, None, None]
