"""The bookkeeping of ``compiled``'s CUDA graphs (``backends/compiled/graphs.py``), on the CPU: which call runs
eagerly, which captures, which replays; copies out; the oldest shapes dropped; a failed capture turns graphs
off. The capture itself is replaced by a stand-in that "replays" the eager function on the static buffers
(the CUDA path is tested in test_compiled_cuda.py, on a GPU)."""
import pytest
import torch

from hqflow.backends.compiled import config, graphs


class _Replay:
    def __init__(self, fn):
        self.fn, self.replays = fn, 0

    def replay(self):
        self.replays += 1
        self.fn()


@pytest.fixture
def fake_capture(monkeypatch):
    captured = []

    def capture(x, w, eager):
        sx, sw = x.clone(), w.clone()
        out = eager(sx, sw)
        entry = graphs._Captured(None, sx, sw, out)
        entry.graph = _Replay(lambda: entry.out.copy_(eager(entry.x, entry.w)))
        captured.append(entry)
        return entry

    monkeypatch.setattr(graphs, "_capture", capture)
    return captured


def test_the_second_call_at_a_shape_captures_and_later_ones_replay(fake_capture):
    g, calls = graphs._Graphs(), []

    def eager(x, w):
        calls.append(x.shape)
        return x * w

    x, w = torch.arange(4.0), torch.tensor(2.0)
    first = g.run(("values", (4,)), x, w, eager)
    assert not fake_capture and len(calls) == 1
    second = g.run(("values", (4,)), x + 1, w, eager)
    assert len(fake_capture) == 1
    third = g.run(("values", (4,)), x + 2, w, eager)
    assert fake_capture[0].graph.replays == 2
    assert torch.equal(first, x * 2) and torch.equal(second, (x + 1) * 2) and torch.equal(third, (x + 2) * 2)
    assert third.data_ptr() != fake_capture[0].out.data_ptr()  # a copy: the next replay cannot change it


def test_at_most_the_configured_shapes_are_kept(fake_capture, monkeypatch):
    monkeypatch.setattr(config, "_GRAPHS", 2)
    g = graphs._Graphs()
    for rows in (1, 2, 3):
        g.run(("values", (rows,)), torch.ones(rows), torch.tensor(1.0), lambda x, w: x * w)
    assert list(g.entries) == [("values", (2,)), ("values", (3,))]


def test_a_failed_capture_warns_once_and_runs_eagerly_from_then_on(monkeypatch):
    def fail(x, w, eager):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(graphs, "_capture", fail)
    g = graphs._Graphs()
    x, w = torch.arange(3.0), torch.tensor(3.0)
    g.run("k", x, w, lambda a, b: a * b)
    with pytest.warns(RuntimeWarning, match="CUDA graph capture failed, running eagerly"):
        out = g.run("k", x, w, lambda a, b: a * b)
    assert torch.equal(out, x * 3) and g.broken and not g.entries
    assert torch.equal(g.run("k", x, w, lambda a, b: a * b), x * 3)


def test_only_cuda_calls_without_autograd_are_graphable(monkeypatch):
    cuda = torch.device("cuda", 0)
    with torch.no_grad():
        assert graphs.graphable(cuda, 10, 4)
        assert not graphs.graphable(torch.device("cpu"), 10, 4)
        assert not graphs.graphable(cuda, 2**20, 4)  # past config._GRAPH_AMPLITUDES
        monkeypatch.setattr(config, "_GRAPHS", 0)
        assert not graphs.graphable(cuda, 10, 4)
    monkeypatch.setattr(config, "_GRAPHS", 16)
    assert not graphs.graphable(cuda, 10, 4)  # autograd on
    with torch.inference_mode():
        assert not graphs.graphable(cuda, 10, 4)
