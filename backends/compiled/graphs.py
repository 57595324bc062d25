"""CUDA graphs of a compiled program's forward passes without gradients, one per call shape.

On CUDA a small batch is bound by kernel launches, not by work (an H200 took 2.8 ms per call whether B was
1k or 100k): a call's few dozen kernels are captured once per (weight mode, output, shapes) and then
replayed as one launch. Only calls without autograd are graphed (policy rollouts, backend jobs): a captured
backward would read the states of the last captured forward, which a second forward before the backward
would overwrite. The first call at a shape runs eagerly (it builds the plan and readout and warms the
allocator), the second captures; a capture that fails turns graphs off for the program, with one warning,
and the call runs eagerly. Outputs are copied out of the graph's buffers, so a result never changes under
its caller, and a lock serializes replays (they share input buffers). At most ``config._GRAPHS`` shapes are
kept per program (the oldest dropped), each up to ``config._GRAPH_AMPLITUDES`` amplitudes (rows x 2**n):
larger calls are not launch-bound, and a graph pins its peak memory.
"""
from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass

import torch

from . import config

_SEEN = object()  # a shape met once: the next call at it captures


@dataclass
class _Captured:
    graph: torch.cuda.CUDAGraph
    x: torch.Tensor
    w: torch.Tensor
    out: torch.Tensor


class _Graphs:
    """The captured forwards of one program, by call shape."""

    def __init__(self):
        self.entries: OrderedDict = OrderedDict()
        self.lock = threading.Lock()
        self.broken: str | None = None

    def run(self, key: tuple, x: torch.Tensor, w: torch.Tensor, eager) -> torch.Tensor:
        """``eager(x, w)``, replayed from a graph once ``key`` has been met before."""
        with self.lock:
            if self.broken is not None:
                return eager(x, w)
            entry = self.entries.get(key)
            if entry is None:
                self._remember(key, _SEEN)
                return eager(x, w)
            if entry is _SEEN:
                try:
                    entry = _capture(x, w, eager)
                except Exception as exc:  # noqa: BLE001  (any op a graph cannot hold: run eagerly from now on)
                    self.broken = f"{type(exc).__name__}: {exc}"
                    self.entries.clear()
                    warnings.warn(f"compiled: CUDA graph capture failed, running eagerly ({self.broken})",
                                  RuntimeWarning, stacklevel=4)
                    return eager(x, w)
                self._remember(key, entry)
            self.entries.move_to_end(key)
            entry.x.copy_(x)
            entry.w.copy_(w)
            entry.graph.replay()
            return entry.out.clone()

    def _remember(self, key: tuple, entry) -> None:
        self.entries[key] = entry
        while len(self.entries) > config._GRAPHS:
            self.entries.popitem(last=False)


def _capture(x: torch.Tensor, w: torch.Tensor, eager) -> _Captured:
    """Warm up on a side stream (as torch asks), then capture ``eager`` on static copies of the inputs, on the
    inputs' device (which need not be the current one)."""
    with torch.cuda.device(x.device):
        sx, sw = x.clone(), w.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                eager(sx, sw)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):  # other threads keep launching meanwhile
            out = eager(sx, sw)
    return _Captured(graph, sx, sw, out)


def graphable(device: torch.device, rows: int, n_qubits: int) -> bool:
    """Whether a call is replayed from a graph: CUDA, no autograd, not in inference mode, small enough."""
    return (device.type == "cuda" and config._GRAPHS > 0 and not torch.is_grad_enabled()
            and not torch.is_inference_mode_enabled() and rows << n_qubits <= config._GRAPH_AMPLITUDES)
