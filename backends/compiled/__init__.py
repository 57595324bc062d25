"""``compiled``: a ``CircuitTemplate`` compiled once into a batched torch program.

    prog = compile_template(template)      # cached by (fingerprint, dtype, device, fusion, gradient)
    values = prog(inputs, weights)         # [B, n_obs], differentiable w.r.t. inputs and weights
    probs = prog.probs(inputs, weights)    # [B, 2**n], wire 0 most significant
    print(prog.describe())                 # stages, fusion width, estimated flops

How a template is compiled (each pass is a small function in a module of this package):

1. **Lowering** (``lower._lower``). Every gate becomes *primitives*: fixed matrices and
   diagonal rotations ``diag(exp(i * angle * spectrum))`` whose angle is affine in
   one symbol. Rotations about X or Y become a fixed basis change around a Z
   rotation (``ry(t) = Vy rz(t) Vy^dag``, ``crx = H_t crz H_t``,
   ``rxx = (H H) rzz (H H)``, ``u = rz ry rz`` up to a global phase), so *every*
   angle-dependent piece, per-sample encodings included, is diagonal.
2. **Scheduling** (``lower._schedule``). Diagonal primitives commute with each other, so
   they are levelled as early as possible. A diagonal level that depends on a
   per-sample symbol (inputs; weights too when they are given per row) is a
   **phase layer**: one ``[B, 2**n]`` phase ``exp(i theta)`` with ``theta`` affine in
   the inputs (one ``addmm`` for all layers; identical layers share columns).
   Everything between two phase layers (fixed gates, weight rotations) is a
   **segment**, the same for every sample.
3. **Fusion** (``fuse._fuse``). A segment is cut greedily, in order, into dense blocks
   of at most ``k`` wires; diagonal primitives may move past diagonal work and
   gather into phase stages of any width. ``k`` (and whether single-qubit gates
   wait for the next multi-qubit gate on their wire) comes from a small cost model
   (``cost._choose_fusion``) or ``fusion=``; for small ``n`` it is the full width, so a
   segment is one ``2**n`` unitary. A block's unitary ``F_m D_m ... D_1 F_0``
   (constant ``F``, weight phases ``D``; ``affine._structure``) is built in torch from
   the weights once per call and shared by the whole batch; all blocks of one size and
   slot count are built together, one batched product per slot (``simulate._build_stacks``).
4. **Layout** (``plan._build_plan``). With ``k < n`` the state's axes are permuted
   (permutations fixed at compile time, on merged axes: ``perm``) so that each block
   acts on the trailing axes: one GEMM per block.
5. **Readout** (``readout._Readout``). Pauli terms are grouped by their X/Y mask: Z-only
   terms are ``|psi|^2 @ M`` and each other group ``Re((conj(psi) * psi[i ^ mask]) @ M)``
   (``psi[i ^ mask]`` flips the masked axes; ``M`` is built a factor per axis). Past 16 qubits
   there is no ``M``: each term contracts the state's product with small tables, 16 axes at a time.

**Wide circuits** (past ``config._WIDE`` = 16 qubits; up to 16 a program is what it always was, bit
for bit): a diagonal layer is a product of *pieces* on runs of at most 16 axes (and one per gate
across runs), so no table has ``2**n`` entries per symbol (``affine._pieces``); a block on adjacent
axes runs in place (a GEMM from the left, no permutation), and a ring's closing block permutes to a
rotation that keeps the next blocks adjacent (``cost._place``); a memory-bound cost model picks the
width; a forward without gradients keeps no state, and the adjoint method un-computes every stage,
so memory stays at a few states (one row of 28 qubits: 2 GiB each in complex64). On CUDA, batches
past ``config._DEVICE_AMPLITUDES`` amplitudes run in chunks. ``MAX_QUBITS`` is 30.

The state is ``[B, 2**n]`` complex (``complex64`` by default, ``complex128`` on
request), on any torch device. Gradients (``gradient=``): ``"fused"`` (default)
runs the state pipeline and readout as one autograd node with a hand-written
backward that keeps the forward states; ``"adjoint"`` (or ``adjoint=True``) is
the adjoint method, which un-computes the states instead (memory: a few states);
``"autograd"`` records plain torch ops (slower, twice differentiable). The
unitaries and phase angles are built from weights and inputs by ordinary torch
ops in every mode (``simulate``: ``_simulate``, ``_FusedSim``). ``torch.compile`` is
not used: Inductor has no complex-number code generation, and on CPU the compiled
program was slower than eager.

A template with derived inputs compiles its lowered form; ``compile_template`` then
gives an ``EncodedProgram`` that takes the raw inputs and computes the derived columns
in torch (checked, and differentiable through to the raw inputs).

Modules: ``config`` (constants and tunables, patched there), ``lower``, ``fuse``,
``affine``, ``cost``, ``plan``, ``perm``, ``readout``, ``simulate``, ``program``
(``CompiledProgram``, ``EncodedProgram``, ``compile_template`` and its cache), ``backend``
(``CompiledBackend``).
"""
from .backend import CompiledBackend
from .config import MAX_QUBITS
from .program import CompiledProgram, EncodedProgram, clear_cache, compile_template

__all__ = ["MAX_QUBITS", "CompiledBackend", "CompiledProgram", "EncodedProgram", "clear_cache", "compile_template"]
