"""A hybrid classifier on two moons: a torch head around a quantum layer, trained by torch.optim.

    python examples/torch_classifier.py [--backend compiled] [--epochs 60] [--quick]
"""
import argparse

import numpy as np
import torch
from torch import nn

from hqflow.ir import Circuit
from hqflow.torch import QuantumLayer
from hqflow.workloads.classifier import two_moons

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--backend", default="compiled", help="any backend: compiled, reference, aer, ...")
parser.add_argument("--epochs", type=int, default=60)
parser.add_argument("--quick", action="store_true", help="30 epochs")
args = parser.parse_args()
torch.manual_seed(0)

c = Circuit(2, name="reupload")  # two qubits, the features uploaded three times between trainable rotations
x, w = c.inputs("x", 2), c.weights("w", 12)
for layer in range(3):
    c.ry(x[0], 0).ry(x[1], 1)
    c.rz(w[4 * layer], 0).ry(w[4 * layer + 1], 0).rz(w[4 * layer + 2], 1).ry(w[4 * layer + 3], 1).cz(0, 1)
template = c.build(observables=["Z0", "Z1", "Z0 Z1"])

model = nn.Sequential(nn.Linear(2, 2), nn.Tanh(), QuantumLayer(template, backend=args.backend, seed=0),
                      nn.Linear(3, 1))
opt = torch.optim.Adam(model.parameters(), lr=0.05)

points, labels = two_moons(400, 0.1, np.random.default_rng(0))
data = torch.tensor((points - points.mean(0)) / points.std(0), dtype=torch.float32)
target = torch.tensor(labels > 0, dtype=torch.float32)[:, None]  # labels are +1 / -1
train, test = slice(0, 300), slice(300, 400)
for epoch in range(30 if args.quick else args.epochs):
    for batch in torch.randperm(300).split(50):
        opt.zero_grad()
        loss = nn.functional.binary_cross_entropy_with_logits(model(data[train][batch]), target[train][batch])
        loss.backward()
        opt.step()
with torch.no_grad():
    accuracy = ((model(data[test]) > 0).float() == target[test]).float().mean().item()
print(model)
print(f"test accuracy {accuracy:.3f} after {epoch + 1} epochs on {args.backend}")
