"""Constants and tunables of the compiled backend, each defined here and nowhere else.

The other modules read the tunables as ``config.NAME`` when they run, not at
import, so ``monkeypatch.setattr(config, "_KEEP_BYTES", ...)`` in a test or a
benchmark takes effect everywhere.
"""
import torch

_DTYPES = {"complex64": torch.complex64, "complex128": torch.complex128}
_GRADIENTS = ("fused", "adjoint", "autograd")
_REAL = {torch.complex64: torch.float32, torch.complex128: torch.float64}
MAX_QUBITS = 30  # hard limit of compile_template (CompiledBackend defaults to 24 on CPU, 30 on CUDA)

# -- tunables -----------------------------------------------------------------------------
_KEEP_BYTES = 2 * 2**30  # "fused" keeps forward states up to this size, else un-computes them (adjoint method)
_CHUNK_AMPLITUDES = 2**19  # CPU batches run in chunks of about this many amplitudes (rows x 2**n)
_DEVICE_AMPLITUDES = 2**27  # on CUDA, batches past this many amplitudes run in chunks of it (memory)
_WIDE = 16  # wider circuits: diagonal layers as pieces of at most ~this many qubits, blocks applied in place
# on adjacent axes (up to this width a program is what it was before wide circuits: the same numbers, bit for bit)
_GRAPHS = 16  # CUDA: forwards without gradients replayed from CUDA graphs, this many shapes per program (0: off)
_GRAPH_AMPLITUDES = 2**22  # ... for calls of at most this many amplitudes (rows x 2**n)
_DENSE_MAP = 2**22  # the weights -> shared angles map is a dense matrix up to this many entries, else gathers
_CACHE_SIZE = 256  # compile_template keeps at most this many programs (oldest evicted first)
# the fusion cost model (cost.py)
_STAGE_OVERHEAD = 30e-6  # per stage and call (kernel launches, Python)
_ROWS = 1000  # batch size the model assumes
