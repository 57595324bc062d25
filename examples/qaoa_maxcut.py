"""QAOA MaxCut on a random 3-regular graph with hqflow: train <C> with Adam, then sample.

    python examples/qaoa_maxcut.py                      # 8 nodes, p = 4
    python examples/qaoa_maxcut.py --nodes 6 --layers 2 --graph erdos_renyi
"""
import argparse
import dataclasses

from hqflow.workloads import qaoa

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--nodes", type=int, default=qaoa.Config.nodes)
parser.add_argument("--layers", type=int, default=qaoa.Config.layers, help="QAOA depth p")
parser.add_argument("--graph", default=qaoa.Config.graph, choices=["regular", "erdos_renyi"])
parser.add_argument("--steps", type=int, default=qaoa.Config.steps)
parser.add_argument("--lr", type=float, default=qaoa.Config.lr)
parser.add_argument("--shots", type=int, default=qaoa.Config.shots)
parser.add_argument("--backend", default=qaoa.Config.backend)
parser.add_argument("--seed", type=int, default=qaoa.Config.seed)
parser.add_argument("--quick", action="store_true", help="6 nodes, p = 2")
args = parser.parse_args()

cfg = qaoa.Config(nodes=args.nodes, layers=args.layers, graph=args.graph, steps=args.steps, lr=args.lr,
                  shots=args.shots, backend=args.backend, seed=args.seed)
if args.quick:
    cfg = dataclasses.replace(cfg, nodes=6, layers=2)
print(qaoa.build_graph(cfg))


def progress(step, out):
    if step % 10 == 0:
        print(f"step {step:4d}  <C> = {out['expected_cut']:.4f}")


r = qaoa.run(cfg, progress=progress)
print(f"graph: {cfg.nodes} nodes, edges {r['edges']}")
print(f"gammas {[round(g, 3) for g in r['gammas']]}  betas {[round(b, 3) for b in r['betas']]}")
print(f"expected cut {r['expected_cut']:.3f} / max cut {r['max_cut']}  ->  approximation ratio {r['approximation_ratio']:.3f}")
print(f"best of {cfg.shots} samples: {r['best_bits']} cuts {r['best_cut']} (ratio {r['sampled_ratio']:.3f}); "
      f"most likely bitstring {r['most_likely']}")
print(f"{cfg.steps} steps in {r['seconds']:.2f} s")
