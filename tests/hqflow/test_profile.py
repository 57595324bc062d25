"""Profiles fitted from spans (hqflow.planning.profile): exact on spans made from a known model, close on an
emulated QPU's measured jobs, saved and loaded, merged; damaged files are one-line errors."""
import json

import pytest

import hqflow as hq
from hqflow.backends.emulated import EmulatedQPU
from hqflow.common.lanes import Lane
from hqflow.common.outcome import OK, Outcome
from hqflow.planning.profile import BackendProfile, Profile, ProfileError, profile
from hqflow.trace import Span
from hqflow.workloads import synthetic


POOL, DEVICE, CPU = Lane("qpu", "pool"), Lane("qpu", "q", slot=0), Lane("cpu")


def _job(k, rows, shots, outcome=OK):
    seconds = 0.01 + 0.002 * rows + 1e-5 * rows * (shots or 0)
    cost = 0.3 + 0.01 * rows + 1e-4 * rows * (shots or 0)
    return Span("circuit", "execute", POOL, k, 1.0 * k, 1.0 * k + 0.05 + seconds, outcome, lane=DEVICE,
                rows=rows, shots=shots, queued=0.05, cost=cost)


def test_a_known_latency_and_price_model_is_recovered_exactly():
    spans = [_job(k, rows, shots) for k, (rows, shots) in enumerate([(4, None), (8, 100), (16, 1000), (32, 10), (5, 50)])]
    spans += [_job(9, 4, None, Outcome.error("boom")), Span("learn", "learn", CPU, 0, 0.0, 0.5), Span("learn", "learn", CPU, 1, 1.0, 1.7)]
    p = profile(spans)
    b = p.backend("qpu:q")
    assert (b.queue, b.per_job, b.per_row, b.per_shot) == pytest.approx((0.05, 0.01, 0.002, 1e-5), abs=1e-9)
    assert (b.price_per_job, b.price_per_row, b.price_per_shot) == pytest.approx((0.3, 0.01, 1e-4), abs=1e-9)
    assert b.failure_rate == pytest.approx(1 / 6) and b.jobs == 6 and b.pool == "qpu:pool"
    assert b.seconds(10, 20) == pytest.approx(0.05 + 0.01 + 0.02 + 0.002)
    f = p.fragment("learn")
    assert (f.seconds, f.calls) == pytest.approx((0.6, 2)) and f.spread == pytest.approx(0.1)


def test_an_emulated_qpus_jobs_give_its_latency_model():
    qpu = EmulatedQPU(queue_wait=0.02, per_job=0.01, per_circuit=0.002, failure_rate=0.2, seed=3)
    spans = []
    for batch in (4, 16, 32):
        cfg = synthetic.Config(staleness=0, backend="qpu", batch=batch)
        spans += hq.run(synthetic.build_graph(cfg), synthetic.stream(6, cfg), backends={"qpu": qpu}, max_retries=20,
                        executor="sync").spans
    b = profile(spans).backend("emulated-qpu")
    assert b.pool == "qpu:qpu"
    assert b.queue == pytest.approx(0.02)  # the backend's own figure
    assert b.per_row == pytest.approx(0.002, rel=0.25)
    assert b.per_job == pytest.approx(0.01, abs=0.005)  # plus the scheduler's own milliseconds
    assert 0.05 < b.failure_rate < 0.45 and b.price_per_job is None


def test_profiles_save_load_and_merge(tmp_path):
    a = profile([_job(k, rows, None) for k, rows in enumerate([4, 8])])
    b = profile([_job(k, rows, None) for k, rows in enumerate([16, 32, 64])])
    path = a.save(str(tmp_path / "profile.json"))
    assert Profile.load(path) == a
    both = a.merged(b)
    assert both.backend("qpu:q").jobs == 5
    assert both.backend("qpu:q").per_row == pytest.approx(0.002)  # both measured the same model


@pytest.mark.parametrize("content, message", [
    ("", "is not JSON"),
    ("[]", "not an hqflow.planning.profile document"),
    (json.dumps({"format": "hqflow.planning.profile", "version": 9}), "unsupported hqflow.planning.profile version 9"),
    (json.dumps({"format": "hqflow.planning.profile", "version": 1, "backends": [{"backend": "qpu:q"}]}), "missing"),
    (json.dumps({"format": "hqflow.planning.profile", "version": 1, "fragments": [
        {"fragment": "f", "resource": "cpu", "seconds": -1.0, "spread": 0.0, "calls": 1}]}), "seconds must be >= 0"),
])
def test_a_damaged_profile_is_a_one_line_error(tmp_path, content, message):
    path = tmp_path / "profile.json"
    path.write_text(content)
    with pytest.raises(ProfileError, match=message) as info:
        Profile.load(str(path))
    assert "\n" not in str(info.value)
    with pytest.raises(ProfileError, match="cannot read profile"):
        Profile.load(str(tmp_path / "missing.json"))


def test_a_fragments_own_jobs_are_counted_per_call_with_the_time_outside_them():
    spans = []
    for step in range(4):  # each call: 2 jobs of 3 rows, 0.01 s apart from each other, 0.05 s of own work
        t = 1.0 * step
        spans.append(Span("rollout", "preprocess", CPU, step, t, t + 0.05 + 0.04, lane=CPU.at(0)))
        for k in range(2):
            start = t + 0.01 + 0.03 * k
            spans.append(Span("rollout", "execute", POOL, step, start, start + 0.02, lane=DEVICE,
                              parent_lane=CPU.at(0), rows=3))
    f = profile(spans).fragment("rollout")
    assert f.calls == 3 and f.jobs == 2.0 and f.rows == 3.0  # the first call left out
    assert f.classical == pytest.approx(0.05) and f.seconds == pytest.approx(0.09)
    plain = profile([Span("learn", "learn", CPU, k, k, k + 0.1) for k in range(3)]).fragment("learn")
    assert plain.jobs == 0.0 and plain.classical is None


def test_circuits_per_step_are_measured_saved_and_merged(tmp_path):
    spans = [_job(k, 4, None) for k in range(3)]
    spans += [Span("circuit", "execute", POOL, 2, 9.0, 9.1, lane=DEVICE, rows=4)]  # step 2 cut in two parts
    p = profile(spans)
    assert dict(p.rows) == {"circuit": 4}  # the median step: 4, 4, 8
    loaded = Profile.load(p.save(str(tmp_path / "p.json")))
    assert loaded.rows == p.rows
    assert dict(loaded.merged(Profile(rows=(("circuit", 6),))).rows) == {"circuit": 6}


def test_a_fit_whose_intercept_alone_comes_out_negative_goes_through_the_origin():
    import numpy as np

    from hqflow.planning.profile import _fit

    rows = np.array([2.0, 4.0, 8.0])
    X = np.column_stack([np.ones(3), rows, np.zeros(3)])
    c = _fit(X, 0.01 * rows - 0.001)  # the least-squares intercept is -0.001
    assert c[0] == 0.0 and c[1] == pytest.approx(0.01 * 84 / 84 - 0.001 * 14 / 84) and c[2] == 0.0


def test_a_backend_profile_takes_member_names_as_a_user_writes_them():
    from hqflow.common.lanes import Lane

    b = BackendProfile("qpu:emulated-qpu#1", "qpu:emulated-qpu", 0.0, 0.01, 0.0, 0.0, 0.0)
    assert b.backend == Lane("qpu", "emulated-qpu", member=1) and b.pool == Lane("qpu", "emulated-qpu")


def test_a_version_1_profile_loads_with_its_computation_unknown_and_merges_as_such(tmp_path):
    import json

    old = {"format": "hqflow.planning.profile", "version": 1, "overhead": 0.001, "rows": {},
           "backends": [{"backend": "qpu:q", "pool": "qpu:qpu", "queue": 0.0, "per_job": 0.01, "per_row": 0.0,
                         "per_shot": 0.0, "failure_rate": 0.0, "jobs": 90}], "fragments": []}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    loaded = Profile.load(str(path))
    assert loaded.backends[0].compute_per_job is None and loaded.cores is None
    fresh = Profile((BackendProfile("qpu:q", "qpu:qpu", 0.0, 0.01, 0.0, 0.0, 0.0, jobs=10, compute_per_job=0.02),))
    assert loaded.merged(fresh).backends[0].compute_per_job == 0.02  # measured once, not averaged with "none"
    assert Profile.load(loaded.merged(fresh).save(str(tmp_path / "new.json"))) == loaded.merged(fresh)


def _member(k, step, rows, per_job, per_row=1e-4):
    """A job of ``rows`` on member ``k`` of a pool of three emulated QPUs, its device time exact."""
    device = per_job + per_row * rows
    return Span("circuit", "execute", Lane("qpu", "emulated-qpu"), step, 1.0 * step, 1.0 * step + device, OK,
                lane=Lane("qpu", "emulated-qpu", k), rows=rows, device=device)


def test_a_member_that_ran_jobs_of_one_size_takes_its_pools_per_row_time():
    # the README's pool calibrated 5 steps: #1 got only whole steps (792 rows) and was fitted 84 ms a job of any
    # size, so a plan cut in two looked no faster on it and the plan flipped to one QPU (issue 34, item 14)
    spans = [_member(0, s, rows, 0.005) for s, rows in enumerate([792, 792, 396, 396])]
    spans += [_member(1, s, 792, 0.005) for s in range(4)] + [_member(2, s, r, 0.05) for s, r in enumerate([792, 396])]
    p = profile(spans)
    one = p.backend("qpu:emulated-qpu#1")
    assert (one.per_job, one.per_row) == pytest.approx((0.005, 1e-4))
    assert one.seconds(792) == pytest.approx(0.005 + 0.0792) and one.seconds(396) == pytest.approx(0.005 + 0.0396)
    # where the pool's per-row time would pass its own, it is scaled to keep the time it measured
    fast = profile([_member(0, s, r, 0.0, 1e-3) for s, r in enumerate([10, 20, 30])] + [_member(1, 0, 10, 0.001, 0)])
    assert fast.backend("qpu:emulated-qpu#1").seconds(10) == pytest.approx(0.001)
    # a member measured alone, and a run folded into a profile: its per-row time from the profile's members
    alone = profile([_member(1, s, 396, 0.005) for s in range(3)])
    assert alone.backend("qpu:emulated-qpu#1").per_row == 0.0
    folded = profile([_member(1, s, 396, 0.005) for s in range(3)], p)
    assert (folded.backend("qpu:emulated-qpu#1").per_job, folded.backend("qpu:emulated-qpu#1").per_row) == \
        pytest.approx((0.005, 1e-4))
