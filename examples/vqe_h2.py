"""VQE for H2 (STO-3G, 0.735 A) on hqflow: Hartree-Fock + one double excitation, Adam.

    python examples/vqe_h2.py                 # 60 steps on the reference simulator
    python examples/vqe_h2.py --backend aer --steps 100
"""
import argparse
import dataclasses

from hqflow.workloads import vqe

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--steps", type=int, default=vqe.Config.steps)
parser.add_argument("--lr", type=float, default=vqe.Config.lr)
parser.add_argument("--bond-length", type=float, default=vqe.Config.bond_length, help="angstrom")
parser.add_argument("--backend", default=vqe.Config.backend)
parser.add_argument("--seed", type=int, default=vqe.Config.seed)
parser.add_argument("--quick", action="store_true", help="20 steps with a larger learning rate")
args = parser.parse_args()

cfg = vqe.Config(bond_length=args.bond_length, steps=args.steps, lr=args.lr, backend=args.backend, seed=args.seed)
if args.quick:
    cfg = dataclasses.replace(cfg, steps=20, lr=0.1)
print(vqe.build_graph(cfg))


def progress(step, out):
    if step % 10 == 0:
        print(f"step {step:4d}  E = {out['energy']:+.6f} Ha")


result = vqe.run(cfg, progress=progress)
print(f"Hartree-Fock energy  {result['hf_energy']:+.6f} Ha")
print(f"VQE energy           {result['energy']:+.6f} Ha  (theta = {result['theta']:.4f})")
print(f"exact ground energy  {result['exact_energy']:+.6f} Ha")
print(f"error                {result['error_mha']:.4f} mHa  (chemical accuracy: 1.6 mHa)")
print(f"{cfg.steps} steps in {result['seconds']:.2f} s")
