"""The core's small types (issue 23, typed data): outcomes, and the scheduler's events. Each round-trips
through its data form, prints exactly the text earlier versions printed, and files of earlier
versions, which hold that text, still load."""
import json

import pytest

from hqflow.events import CallDone, TaskDone, Wake
from hqflow.outcome import CANCELLED, OK, TIMEOUT, Outcome
from hqflow.trace import Span, load_spans, outcome_counts, save_spans


# -- outcomes -------------------------------------------------------------------------------

@pytest.mark.parametrize("outcome, text", [(OK, "ok"), (TIMEOUT, "timeout"), (CANCELLED, "cancelled"),
                                           (Outcome.error("boom: twice"), "error: boom: twice")])
def test_an_outcome_prints_its_old_text_and_round_trips(outcome, text):
    assert str(outcome) == text and Outcome.parse(text) == outcome
    assert Outcome.from_dict(json.loads(json.dumps(outcome.to_dict()))) == outcome
    assert outcome == text and hash(outcome) == hash(text)  # scripts that compare with the text keep working
    assert outcome.ok == (text == "ok")


def test_an_error_carries_its_message_and_only_an_error_has_one():
    e = Outcome.error(ValueError("bad x"))
    assert (e.kind, e.message, e.ok) == ("error", "bad x", False)
    for bad in (lambda: Outcome("error"), lambda: Outcome("ok", "x"), lambda: Outcome("failed")):
        with pytest.raises(ValueError):
            bad()
    with pytest.raises(ValueError, match="not an outcome"):
        Outcome.parse("error")


def test_outcomes_are_counted_by_kind():
    spans = [Span("a", "execute", "qpu:q", 0, 0.0, 1.0, o) for o in (OK, OK, Outcome.error("x"), Outcome.error("y"),
                                                                      TIMEOUT)]
    assert outcome_counts(spans) == {"ok": 2, "error": 2, "timeout": 1}


# -- spans files of earlier versions --------------------------------------------------------

OLD_SPANS = {"format": "hqflow.spans", "version": 5, "meta": {"workload": "demo"}, "spans": [
    {"fragment": "prep", "kind": "prepare", "resource": "cpu", "step": 0, "start": 0.0, "end": 0.5,
     "outcome": "ok", "version": None, "lane": "cpu/0", "parent_lane": None},
    {"fragment": "circ", "kind": "execute", "resource": "qpu:q", "step": 0, "start": 0.5, "end": 1.0,
     "outcome": "error: injected failure", "version": 0, "lane": "qpu:emu#1/0", "parent_lane": None, "rows": 4},
    {"fragment": "circ", "kind": "execute", "resource": "qpu:q", "step": 0, "start": 1.0, "end": 1.5,
     "outcome": "timeout", "version": 0, "lane": "qpu:emu#0", "service_jobs": 2}]}


def test_a_spans_file_of_an_earlier_version_loads_and_is_written_anew_as_objects(tmp_path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps(OLD_SPANS))
    spans, meta = load_spans(str(old))
    assert meta == {"workload": "demo"}
    assert [s.outcome for s in spans] == [OK, Outcome.error("injected failure"), TIMEOUT]
    assert [str(s.outcome) for s in spans] == [d["outcome"] for d in OLD_SPANS["spans"]]
    new = save_spans(str(tmp_path / "new.json"), spans)
    doc = json.loads(open(new).read())
    assert doc["spans"][1]["outcome"] == {"kind": "error", "message": "injected failure"}
    assert load_spans(new)[0] == spans


# -- events ----------------------------------------------------------------------------------

def test_events_are_told_apart_by_type():
    seen = []
    for event in (TaskDone(None, 0, None, "cpu", 0, 0.0, 1.0, None), CallDone(None, 1, None, None), Wake()):
        match event:
            case TaskDone(step=step):
                seen.append(("task", step))
            case CallDone(step=step):
                seen.append(("call", step))
            case Wake():
                seen.append(("wake",))
    assert seen == [("task", 0), ("call", 1), ("wake",)]
