"""Fragment replicas and their reduction (hqflow.engine.collective): rank order, idempotent redo, aborts;
the scheduler's replicated learn instances under the local executor."""
import threading

import numpy as np
import pytest

import hqflow as hq
from hqflow.engine.collective import CollectiveError, Rendezvous, Replica, as_replica, reduce, replica


def _ranks(rz, size, arrays_of, ops, group="g", timeout=10.0):
    out, errors = {}, {}

    def go(r):
        try:
            out[r] = rz.reduce(group, r, size, arrays_of(r), ops, timeout)
        except Exception as exc:  # noqa: BLE001 - the test reads it
            errors[r] = exc

    threads = [threading.Thread(target=go, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out, errors


def test_sums_in_rank_order_and_every_rank_gets_the_same_bits():
    rng = np.random.default_rng(0)
    parts = [rng.standard_normal(50) * 10.0 ** rng.integers(-8, 8, 50) for _ in range(3)]
    out, errors = _ranks(Rendezvous(), 3, lambda r: [parts[r], np.full(2, float(r))], ["sum", "first"])
    assert not errors
    expected = (parts[0] + parts[1]) + parts[2]
    for r in range(3):
        np.testing.assert_array_equal(out[r][0], expected)  # bit for bit: the same order on every rank
        np.testing.assert_array_equal(out[r][1], [0.0, 0.0])  # rank 0's


def test_absent_arrays_count_as_absent():
    out, _ = _ranks(Rendezvous(), 2, lambda r: [None, np.ones(2) if r == 1 else None], ["sum", "sum"])
    assert out[0][0] is None
    np.testing.assert_array_equal(out[0][1], [1.0, 1.0])


def test_a_redone_contribution_changes_nothing():
    """A replica that Ray restarted contributes again: before or after the group completed."""
    rz = Rendezvous()
    rz._parts["g"] = {0: [np.array([1.0])]}  # rank 0 contributed, then its process died
    out, _ = _ranks(rz, 2, lambda r: [np.array([1.0 + r])], ["sum"])
    np.testing.assert_array_equal(out[1][0], [3.0])
    late = rz.reduce("g", 0, 2, [np.array([100.0])], ["sum"], 1.0)  # a redo after everyone had the result
    np.testing.assert_array_equal(late[0], [3.0])


def test_an_aborted_group_fails_its_waiters_in_one_line():
    rz = Rendezvous()
    timer = threading.Timer(0.2, rz.abort, args=("run/learn/3/", "replica 1 failed: boom"))
    timer.start()
    with pytest.raises(CollectiveError, match="replica 1 failed: boom"):
        rz.reduce("run/learn/3/grad0", 0, 2, [np.ones(1)], ["sum"], 10.0)
    with pytest.raises(CollectiveError, match=r"ranks \[0\] of 2 came within 0.2 s"):
        rz.reduce("other", 0, 2, [np.ones(1)], ["sum"], 0.2)


def test_reduce_outside_replicas_returns_its_arrays_and_checks_its_ops():
    assert replica() is None
    a = np.arange(3.0)
    np.testing.assert_array_equal(reduce([a])[0], a)
    with pytest.raises(ValueError, match="one op of"):
        reduce([a], ["mean"])
    rz = Rendezvous()
    with as_replica(Replica(0, 1, "g", rz)):
        assert replica().rank == 0
        np.testing.assert_array_equal(reduce([a], "sum")[0], a)
    assert replica() is None


# -- the scheduler ----------------------------------------------------------------------------

def _learn(x, w):
    """Each replica adds its share of x's rows; the reduced sum is the whole sum on every replica."""
    rep = replica()
    rank, size = (rep.rank, rep.size) if rep else (0, 1)
    rows = np.asarray(x, dtype=float)
    share = rows[len(rows) * rank // size: len(rows) * (rank + 1) // size].sum(axis=0)
    total = reduce([share], "sum")[0]
    return {"w": w + total, "rank": rank}


def _fails_on_rank_1(x, w):
    if replica().rank == 1:
        raise ValueError("replica broke")
    reduce([np.ones(1)])
    return {"w": w, "rank": 0}


def _graph(fn, resource="gpu"):
    pipe = hq.Pipeline("replicas")
    pipe.input("x", "any")
    pipe.learn(fn, name="learn", inputs={"x": "any", "w": "any"}, outputs={"w": "any", "rank": "scalar"},
               resource=resource)
    pipe.loop("learn.w", "learn.w", init=np.zeros(2))
    pipe.output("learn.w")
    pipe.output("learn.rank")
    return pipe.build()


STREAM = [{"x": np.arange(10.0).reshape(5, 2) + k} for k in range(4)]


@pytest.mark.parametrize("learners", [1, 2, 3])
def test_replicated_learn_instances_equal_one_learner(learners):
    res = hq.run(_graph(_learn), STREAM, executor="local", gpu_workers=3, learners=learners)
    ref = hq.run(_graph(_learn), STREAM, executor="sync")
    for a, b in zip(res.outputs, ref.outputs):
        np.testing.assert_allclose(a["w"], b["w"], rtol=1e-15)
        assert a["rank"] == 0  # rank 0's outputs are the instance's
    lanes = {s.lane for s in res.spans if s.fragment == "learn"}
    assert len(lanes) == learners  # each replica on its own learner slot


def test_a_failed_replica_fails_the_run_in_one_line_and_its_peers_do_not_hang():
    with pytest.raises(hq.RunFailed) as info:
        hq.run(_graph(_fails_on_rank_1), STREAM, executor="local", gpu_workers=2, learners=2)
    assert "replica broke" in str(info.value) and "\n" not in str(info.value)


def test_learners_are_checked():
    with pytest.raises(ValueError, match="learners=3 needs as many learner slots, but gpu_workers=2"):
        hq.SchedulerConfig(gpu_workers=2, learners=3)
    with pytest.raises(ValueError, match="learners > 1 runs replicas at once: use the local or ray executor"):
        hq.SchedulerConfig(executor="sync", gpu_workers=2, learners=2)
    with pytest.raises(ValueError, match="learners must be an integer >= 1"):
        hq.SchedulerConfig(learners=0)
    # a learn step on cpu runs its replicas on cpu slots: too few is said at once, not a stalled run
    with pytest.raises(ValueError, match="learners=2 run side by side on cpu slots, but cpu_workers=1"):
        hq.run(_graph(_learn, "cpu"), STREAM, executor="local", gpu_workers=2, learners=2)
    res = hq.run(_graph(_learn, "cpu"), STREAM, executor="local", cpu_workers=2, gpu_workers=2, learners=2)
    np.testing.assert_allclose(res.outputs[-1]["w"], hq.run(_graph(_learn), STREAM, executor="sync").outputs[-1]["w"])


# -- compression ------------------------------------------------------------------------------

from hqflow.engine.collective import Compression, Sparse  # noqa: E402


def test_topk_sends_k_entries_and_keeps_the_rest_as_residual():
    rng = np.random.default_rng(1)
    g, old = rng.standard_normal(100), rng.standard_normal(100) * 0.1
    sent, left = Compression("topk", 0.1).encode(g, old)
    assert isinstance(sent, Sparse) and len(sent.index) == 10 and sent.nbytes == 80
    np.testing.assert_allclose(sent.dense() + left, g + old, rtol=0, atol=1e-12)  # nothing lost
    top = np.argsort(np.abs(g + old))[-10:]
    assert set(sent.index.tolist()) == set(top.tolist())


def test_float16_keeps_its_rounding_as_residual():
    g = np.random.default_rng(2).standard_normal(50) * 1e-3
    sent, left = Compression("float16").encode(g, None)
    assert sent.dtype == np.float16 and sent.nbytes == g.nbytes // 4
    np.testing.assert_allclose(sent.astype(float) + left, g, rtol=0, atol=1e-15)


def test_error_feedback_sends_the_whole_gradient_over_time():
    g, residual, total = np.linspace(-1, 1, 20), None, np.zeros(20)
    for _ in range(200):
        sent, residual = Compression("topk", 0.05).encode(g, residual)
        total += sent.dense()
    np.testing.assert_allclose(total + residual, 200 * g, atol=1e-9)  # what was not sent is still owed
    assert np.abs(residual).max() <= 20 * np.abs(g).max()  # and the debt stays bounded: all of g gets sent
    np.testing.assert_allclose(total / 200, g, atol=0.1)


def test_sparse_contributions_sum_as_their_dense_arrays():
    a = Sparse(np.array([1, 3], dtype=np.int32), np.array([1.0, 2.0], dtype=np.float32), 5)
    out, _ = _ranks(Rendezvous(), 2, lambda r: [a if r == 0 else np.ones(5)], ["sum"])
    np.testing.assert_array_equal(out[1][0], [1.0, 2.0, 1.0, 3.0, 1.0])


def test_compression_parses_and_validates():
    assert Compression.parse("topk:0.25") == Compression("topk", 0.25)
    assert Compression.parse("float16") == Compression("float16")
    for text, message in (("zip", "compression must be one of none, topk, float16"),
                          ("topk:0", r"compression ratio must be a number in \(0, 1\]"),
                          ("topk:x", r"compression ratio must be a number in \(0, 1\], got 'x'"),
                          ("none:0.5", "only topk takes a ratio")):
        with pytest.raises(ValueError, match=message):
            Compression.parse(text)
