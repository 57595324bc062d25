"""A circuit scan on Azure Quantum: price it, then run it, values with standard errors.

    python examples/azure_quantum.py [--target ionq.simulator] [--loopback] [--quick]

With a workspace configured (AZURE_QUANTUM_SUBSCRIPTION_ID, ..._WORKSPACE_RG,
..._WORKSPACE_NAME, ..._WORKSPACE_LOCATION, and AZURE_QUANTUM_API_KEY or an
`az login`), it runs on that workspace. Without one, or with --loopback, it starts
the loopback job service and Azurite on 127.0.0.1 (needs node and npm) and runs there.
"""
import argparse
import contextlib
import os
from pathlib import Path

import numpy as np

from hqflow.backends import CircuitBatch, get_backend
from hqflow.ir import Circuit


def scan_circuit():
    c = Circuit(2, name="scan")
    x, w = c.inputs("x", 1), c.weights("w", 1)
    c.ry(x[0], 0).cx(0, 1).rx(w[0], 1)
    return c.build(observables=["Z0 Z1", "X1", "Z0"])  # Z0 Z1 and Z0 share a job; X1 gets its own


@contextlib.contextmanager
def loopback():
    """The loopback service on Azurite, both stopped on exit; yields workspace options (or None)."""
    from hqflow.backends.azure.azurite import Azurite, ensure_installed
    from hqflow.backends.azure.loopback import LoopbackService

    exe = ensure_installed(str(Path(__file__).resolve().parents[1]))
    if exe is None:
        yield None
        return
    with Azurite.start(exe) as azurite, LoopbackService.start(storage=azurite.connection_string,
                                                             key=os.urandom(16).hex()) as svc:
        yield svc.workspace_options()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="ionq.simulator", help="an Azure Quantum target (default ionq.simulator)")
    ap.add_argument("--loopback", action="store_true", help="use the local loopback service, not a workspace")
    ap.add_argument("--quick", action="store_true", help="5 angles and 200 shots")
    args = ap.parse_args()
    use_loopback = args.loopback or not os.environ.get("AZURE_QUANTUM_WORKSPACE_NAME")
    with (loopback() if use_loopback else contextlib.nullcontext({})) as options:
        if options is None:
            print("no workspace configured and no node/npm for the loopback service: nothing to run")
            return 0
        rows, shots = (5, 200) if args.quick else (21, 1000)
        template = scan_circuit()
        angles = np.linspace(0, np.pi, rows)[:, None]
        batch = CircuitBatch.make(template, angles, [0.3], shots=shots, seed=0)
        backend = get_backend(f"azure:{args.target}", **options)
        print("estimated:", backend.estimate_cost(batch))  # before anything is submitted
        for paid in ("ionq.qpu.aria-1", "quantinuum.qpu.h2-1"):  # pricing needs no workspace
            print(f"  on {paid}:", get_backend(f"azure:{paid}").estimate_cost(batch))
        result = backend.submit(batch).result(timeout=600)
        backend.close()
        exact = get_backend("reference").run_checked(CircuitBatch.make(template, angles, [0.3])).values
        print(f"{'x':>6} " + " ".join(f"{str(o).removeprefix('+1*'):>21}" for o in template.observables)
              + "   (exact in brackets)")
        for x, v, e, ex in zip(angles[:, 0], result.values, result.stderr, exact):
            cells = " ".join(f"{vi:>+8.3f} ± {ei:.3f} ({xi:+.2f})" for vi, ei, xi in zip(v, e, ex))
            print(f"{x:>6.3f} {cells}")
        print(f"{result.metadata['service_jobs']} service jobs, cost {result.metadata['cost']:.4f} "
              f"{result.metadata['currency']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
