#!/usr/bin/env bash
# Issue 26's one prepared GPU check: the CUDA tests, then benchmarks/simulators.py on the GPU (the circuit
# tables, --wide, --learner), each capped in time, about 8 minutes in all on an H100 or H200. Logs and the
# JSON lines go to $OUT (the device tool brings them back; elsewhere $OUT defaults to ./gpu_check_out).
#
# The device image has torch, JAX (CUDA), numpy, scipy, networkx, sympy, opt-einsum, matplotlib, tqdm,
# tensorboard, cloudpickle, pytest, pytest-timeout and hypothesis. It lacks what these runs import besides:
# gymnasium (the learner; with farama-notifications) and the bench peers pyqtorch and tensorcircuit-ng
# (with tensornetwork-ng and graphviz). hqflow itself comes from this checkout through PYTHONPATH
# (hqflow/__init__.py adds ir/, backends/ and workloads/); none of these runs imports qiskit, PennyLane or
# Ray. Not carried: lightning.gpu (its cuQuantum wheels are far over the 64 MiB a call carries): the
# benchmark lists it as not available.
#
# First, here, in the repo root (about 1.4 MB of wheels, all pure Python):
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
#     -d .whl gymnasium==1.4.0 farama-notifications==0.0.6 pyqtorch==1.7.8 tensorcircuit-ng==1.10.0 \
#     tensornetwork-ng==0.5.3 graphviz==0.21
# Then run it on the device: command "bash benchmarks/gpu_check.sh", carry [".whl"], timeout_s 600.
# Check it without running it: bash -n benchmarks/gpu_check.sh
set -euo pipefail

cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu_check_out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
# JAX: full-precision float32 matmuls (its default TF32 gave errors of 1e-3) and no preallocation of 75%
# of the GPU's memory, which torch needs as well in the same process
export PYTHONUNBUFFERED=1 NVIDIA_TF32_OVERRIDE=0 XLA_PYTHON_CLIENT_PREALLOCATE=false

if compgen -G ".whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
else
    echo "gpu_check: no .whl/ folder: the bench peers and gymnasium must already be installed" | tee "$OUT/notes.log"
fi
export PYTHONPATH="$PWD:$PYTHONPATH"

# step NAME SECONDS COMMAND...: run COMMAND under a time limit, its output to $OUT/NAME.log; a step that fails
# or runs out of time is reported, and the next one still runs
failed=()
step() {
    local name=$1 limit=$2
    shift 2
    echo "== $name (at most ${limit} s): $*"
    local start=$SECONDS rc=0
    timeout -s TERM -k 20 "$limit" "$@" 2>&1 | tee "$OUT/$name.log" || rc=$?
    echo "== $name: exit $rc after $((SECONDS - start)) s"
    if [ "$rc" -ne 0 ]; then failed+=("$name:$rc"); fi
}

{
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
    "$PY" - <<'EOF'
import importlib.metadata as md
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(),
      torch.cuda.get_device_name() if torch.cuda.is_available() else "-")
for dist in ("jax", "jaxlib", "pyqtorch", "tensorcircuit-ng", "gymnasium", "numpy"):
    try:
        print(dist, md.version(dist))
    except md.PackageNotFoundError:
        print(dist, "not installed")
EOF
} 2>&1 | tee "$OUT/env.log" || true

# the CUDA tests: every test file with a gpu mark, its gpu tests only
mapfile -t gpu_files < <(grep -rlE "pytest\.mark\.gpu|mark\.gpu" tests --include='*.py' | sort)
if [ "${#gpu_files[@]}" -gt 0 ]; then
    step pytest_gpu 110 "$PY" -m pytest -q -p no:cacheprovider -m gpu "${gpu_files[@]}"
fi
# the circuit tables on CUDA: 4q and 8q at B = 1k, 10k, 100k and 16q at 512, against pyqtorch (CUDA) and
# tensorcircuit-ng (JAX); a short cell budget (compiled 5x) keeps it to a few minutes; SIGTERM prints the
# figures measured so far
step simulators_cuda 210 "$PY" benchmarks/simulators.py --device cuda --budget 3
# widest first: the issue's 28-qubit figure must not be the one a time limit cuts
step simulators_cuda_wide 120 "$PY" benchmarks/simulators.py --device cuda --wide --wide-qubits 28,24,20,16
step simulators_learner 60 "$PY" benchmarks/simulators.py --learner

# the JSON lines in one file (each run's last line of figures; its log has stderr's lines too)
for name in simulators_cuda simulators_cuda_wide simulators_learner; do
    if [ -f "$OUT/$name.log" ]; then
        grep '^{' "$OUT/$name.log" | tail -n 1 >>"$OUT/json_lines.txt" || echo "$name: no JSON line" \
            >>"$OUT/json_lines.txt"
    fi
done
echo "gpu_check: done in ${SECONDS} s; failed steps: ${failed[*]:-none}"
