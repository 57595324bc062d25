"""The planner (hqflow.planning.planner): it picks the known optimum on small cases, honours the objective,
the budget and the staleness the algorithm allows, prints a table, and applying a plan at
staleness 0 changes no result."""
import dataclasses

import numpy as np
import pytest

import hqflow as hq
from hqflow.backends import get_backend
from hqflow.common.lanes import Lane
from hqflow.planning.planner import apply, calibration, with_staleness
from hqflow.planning.profile import BackendProfile, FragmentProfile, Profile, profile
from hqflow.trace import Span
from hqflow.workloads import synthetic


def _profile(c, members, per_row=0.0):
    """``members``: (per_job seconds, price per job) of each member of pool "qpu"."""
    many = len(members) > 1
    backends = tuple(BackendProfile(Lane("qpu", "q", k if many else None), Lane("qpu", "qpu"), 0.0, t, per_row, 0.0,
                                    0.0, price,
                                    jobs=5) for k, (t, price) in enumerate(members))
    return Profile(backends, (FragmentProfile("learn", "cpu", c, 0.0, 5),))


def _graph(staleness=2):
    return synthetic.build_graph(synthetic.Config(staleness=staleness, backend="qpu"))


def test_it_overlaps_when_the_algorithm_allows_and_not_otherwise():
    prof = _profile(0.02, [(0.02, None)])
    best = hq.plan(_graph(2), 50, prof)
    assert best.staleness >= 1 and best.prediction.makespan == pytest.approx(50 * 0.02 + 0.02)
    strict = hq.plan(_graph(2), 50, prof, max_staleness=0)
    assert strict.staleness == 0 and strict.prediction.makespan == pytest.approx(50 * 0.04)
    assert hq.plan(_graph(0), 50, prof).staleness == 0  # the graph's own bound


def test_time_uses_every_qpu_cost_picks_the_cheap_one_and_a_budget_is_kept():
    prof = _profile(0.001, [(0.02, 1.0), (0.02, 3.0)])  # two equal QPUs, one three times the price
    fast = hq.plan(_graph(4), 40, prof, objective="time")
    assert dict(fast.members)["qpu"] == ("qpu:q#0", "qpu:q#1")
    cheap = hq.plan(_graph(4), 40, prof, objective="cost")
    assert dict(cheap.members)["qpu"] == ("qpu:q#0",) and cheap.prediction.spend == pytest.approx(40.0)
    assert fast.prediction.spend == pytest.approx(80.0)  # the jobs split between the two
    assert dict(hq.plan(_graph(4), 40, prof, budget=80.0).members)["qpu"] == ("qpu:q#0", "qpu:q#1")
    capped = hq.plan(_graph(4), 40, prof, budget=60.0)  # both would spend 80: the cheap one alone
    assert capped.prediction.spend <= 60.0 and dict(capped.members)["qpu"] == ("qpu:q#0",)
    assert capped.prediction.makespan == pytest.approx(2 * fast.prediction.makespan, rel=0.05)
    with pytest.raises(ValueError, match="no configuration fits a budget of 10"):
        hq.plan(_graph(4), 40, prof, budget=10.0)


def test_a_slow_member_is_left_out_when_it_only_delays():
    prof = _profile(0.001, [(0.01, None), (0.5, None)])  # the second QPU is 50 times slower
    best = hq.plan(_graph(1), 20, prof)
    assert dict(best.members)["qpu"] == ("qpu:q#0",)


def test_rows_are_cut_over_a_pool_when_rows_cost_more_than_jobs():
    per_row = _profile(0.001, [(0.001, None)] * 3, per_row=0.01)  # 8 rows: 81 ms whole, 31 ms in three
    cut = hq.plan(_graph(0), 20, per_row, rows=8)
    assert cut.config.rows_per_job == 3 and len(dict(cut.members)["qpu"]) == 3
    assert cut.prediction.makespan == pytest.approx(20 * (0.001 + 0.031), rel=0.02)
    per_job = _profile(0.001, [(0.05, None)] * 3, per_row=0.0001)  # jobs cost more than rows, and with
    assert hq.plan(_graph(4), 20, per_job, rows=8).config.rows_per_job is None  # staleness every QPU has a step


def test_a_cut_plan_at_staleness_0_changes_no_result():
    cfg = synthetic.Config(staleness=0, backend="qpu", batch=6)
    graph, stream = synthetic.build_graph(cfg), synthetic.stream(4, cfg)
    pool = {"qpu": [get_backend("reference"), get_backend("reference")]}
    chosen = hq.plan(graph, 4, _profile(0.001, [(0.001, None)] * 2, per_row=0.01), rows=6)
    assert chosen.config.rows_per_job == 3
    ref = hq.run(graph, stream, backends=pool, executor="sync")
    res = hq.run(graph, stream, backends=pool, plan=chosen)
    assert res.outputs == ref.outputs and sum(s.kind == "execute" for s in res.spans) == 8


def test_a_plan_prints_its_choices_and_prediction():
    text = str(hq.plan(_graph(2), 10, _profile(0.01, [(0.02, 0.5)]), budget=100.0))
    for words in ("objective", "time under a budget of 100", "staleness", "prefetch", "rows per job", "pool qpu", "qpu:q",
                  "predicted makespan", "predicted spend", "utilization qpu:q", "candidates"):
        assert words in text


def test_bad_arguments_are_one_line_errors():
    prof = _profile(0.01, [(0.02, None)])
    with pytest.raises(ValueError, match="objective must be one of time, cost"):
        hq.plan(_graph(), 5, prof, objective="speed")
    with pytest.raises(ValueError, match="max_staleness must be an integer >= 0"):
        hq.plan(_graph(), 5, prof, max_staleness=-1)
    with pytest.raises(ValueError, match="no profile of a backend in pool 'qpu'"):
        hq.plan(_graph(), 5, Profile((), prof.fragments))


def test_applying_a_plan_at_staleness_0_changes_no_result():
    cfg = synthetic.Config(staleness=0, backend="qpu")
    graph, stream = synthetic.build_graph(cfg), synthetic.stream(6, cfg)
    pool = {"qpu": [get_backend("reference"), get_backend("reference")]}
    prof = _profile(0.001, [(0.01, None), (0.01, None)])
    chosen = hq.plan(graph, 6, prof)
    assert chosen.staleness == 0
    ref = hq.run(graph, stream, backends=pool, executor="sync")
    res = hq.run(graph, stream, backends=pool, plan=chosen, executor="local")
    assert res.outputs == ref.outputs
    np.testing.assert_array_equal(res.state["learn.weights"], ref.state["learn.weights"])
    planned_graph, backends, config = apply(chosen, graph, pool)
    assert len(backends["qpu"]) == len(dict(chosen.members)["qpu"]) and config.prefetch == chosen.config.prefetch
    overlapped = hq.plan(graph, 6, _profile(0.02, [(0.02, None)]), max_staleness=2)  # the user's bound
    assert overlapped.staleness >= 1
    assert {e.max_staleness for e in apply(overlapped, graph)[0].edges if e.loop and e.src[0] != e.dst[0]} \
        == {overlapped.staleness}
    assert with_staleness(_graph(2), 0).edges != _graph(2).edges


def test_a_run_of_a_plan_names_its_members_as_the_pool_it_was_planned_for():
    # a pool of two where the plan keeps the second alone: the run's spans, and a profile of them, file its jobs
    # under #1, never under the name a pool of one gives its member (the profile then held both, and a plan
    # from it named members of one pool two ways, which no pool given has)
    cfg = synthetic.Config(staleness=0, backend="qpu")
    graph, stream = synthetic.build_graph(cfg), synthetic.stream(4, cfg)
    pool = {"qpu": [get_backend("reference"), get_backend("reference")]}
    chosen = hq.plan(graph, 4, _profile(0.001, [(0.5, None), (0.01, None)]))
    assert dict(chosen.members)["qpu"] == ("qpu:q#1",)
    res = hq.run(graph, stream, backends=pool, plan=chosen)
    assert {s.row for s in res.spans if s.resource.quantum} == {Lane("qpu", "q", 1)}
    again = hq.plan(graph, 4, _profile(0.001, [(0.5, None), (0.01, None)]).merged(profile(res.spans)))
    assert {m.member for m in dict(again.members)["qpu"]} <= {0, 1}
    apply(again, graph, pool)  # its members are in the pool given


def _job(member, step, start, rows, per_job):
    """A job of the README's pool (emulated QPUs, 0.1 ms a row) on ``member``, its device time exact."""
    device = per_job + 1e-4 * rows
    return Span("circuit", "execute", Lane("qpu", "qpu"), step, start, start + device, lane=Lane("qpu", "emulated-qpu",
                                                                                                 member),
                rows=rows, device=device)


@pytest.mark.parametrize("whole", [0, 1])
def test_the_readme_pools_plan_uses_both_fast_qpus_whichever_got_only_whole_steps(whole):
    # issue 34, item 14: a 5-step calibration gave one fast QPU only whole steps (792 rows); fitted 84 ms a job of
    # any size, it made a plan cut in two look no faster, and the plan flipped to one QPU between runs
    spans = [_job(whole, s, s, 792, 0.005) for s in range(4)] + [_job(2, s, s, r, 0.05) for s, r in enumerate([792, 396])]
    spans += [_job(1 - whole, s, s, r, 0.005) for s, r in enumerate([792, 792, 396, 396])]
    prof = dataclasses.replace(profile(spans), fragments=(FragmentProfile("learn", "cpu", 0.001, 0.0, 5),))
    best = hq.plan(_graph(0), 60, prof, rows=792)
    assert sorted(map(str, dict(best.members)["qpu"])) == ["qpu:emulated-qpu#0", "qpu:emulated-qpu#1"]
    assert best.config.rows_per_job == 396


def _calibration_run(learn: list[float]):
    """A workload's ``run(steps, rows_per_job)`` whose spans are written, not measured: steps of a 792-row
    step cut over two fast QPUs, then a learner call of ``learn[k]`` seconds in the k-th round."""
    rounds = []

    def run(steps, cut):
        rounds.append(cut) if cut is None else None
        c, spans, t = learn[len(rounds) - 1], [], 0.0
        for step in range(steps):
            parts = [792] if cut is None else [cut, 792 - cut]
            spans += [_job(k, step, t, rows, 0.005) for k, rows in enumerate(parts)]
            t = max(s.end for s in spans)
            spans.append(Span("learn", "learn", Lane("cpu"), step, t, t + c, lane=Lane("cpu", slot=0)))
            t += c
        return spans
    return run, rounds


def test_the_calibration_runs_rounds_until_its_estimates_settle_and_outvotes_an_upset_one():
    run, rounds = _calibration_run([0.5, 0.02, 0.02, 0.02])  # the first round under a load that slowed its learner
    prof = calibration(run, 5, _graph(0))
    assert len(rounds) == 3 and prof.fragment("learn").seconds == pytest.approx(0.02)
    assert prof.backend("qpu:emulated-qpu#1").per_row == pytest.approx(1e-4)  # every round's jobs
    run, rounds = _calibration_run([0.02, 0.021, 0.5])  # two rounds that agree: no third
    assert calibration(run, 5, _graph(0)).fragment("learn").seconds == pytest.approx(0.02) and len(rounds) == 2
