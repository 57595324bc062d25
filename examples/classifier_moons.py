"""A data re-uploading quantum classifier on two moons with hqflow (mini-batches from the stream).

    python examples/classifier_moons.py               # 150 steps, 4 layers
    python examples/classifier_moons.py --noise 0.2 --layers 5 --steps 300
"""
import argparse
import dataclasses

from hqflow.workloads import classifier

C = classifier.Config
parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--samples", type=int, default=C.samples)
parser.add_argument("--noise", type=float, default=C.noise)
parser.add_argument("--layers", type=int, default=C.layers)
parser.add_argument("--steps", type=int, default=C.steps)
parser.add_argument("--batch-size", type=int, default=C.batch_size)
parser.add_argument("--lr", type=float, default=C.lr)
parser.add_argument("--backend", default=C.backend)
parser.add_argument("--seed", type=int, default=C.seed)
parser.add_argument("--quick", action="store_true", help="60 steps")
args = parser.parse_args()

cfg = C(samples=args.samples, noise=args.noise, layers=args.layers, steps=args.steps,
        batch_size=args.batch_size, lr=args.lr, backend=args.backend, seed=args.seed)
if args.quick:
    cfg = dataclasses.replace(cfg, steps=60)
print(classifier.build_graph(cfg))


def progress(step, out):
    if step % 25 == 0:
        print(f"step {step:4d}  loss {out['loss']:.4f}  batch accuracy {out['batch_accuracy']:.2f}")


r = classifier.run(cfg, progress=progress)
print(f"train accuracy {r['train_accuracy']:.3f}   test accuracy {r['test_accuracy']:.3f}")
print(f"{cfg.steps} steps in {r['seconds']:.2f} s")
