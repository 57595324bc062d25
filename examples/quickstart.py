"""Quickstart: fit a 2-qubit circuit's <Z0 Z1> to 0.5 with a hybrid pipeline (the README example)."""
import numpy as np

import hqflow as hq
from hqflow.ir import Circuit

# A circuit with per-sample inputs x, trainable weights w and the readout <Z0 Z1>.
c = Circuit(2, name="fit")
x, w = c.inputs("x", 2), c.weights("w", 2)
c.ry(x[0], 0).ry(x[1], 1).cz(0, 1).ry(w[0], 0).ry(w[1], 1)
circuit = c.build(observables=["Z0 Z1"])

pipe = hq.Pipeline("quickstart")
pipe.input("x", "array")
pipe.execute("circuit", circuit, backend="reference", gradient="param-shift")
pipe.connect("input.x", "circuit.inputs")


@pipe.learn(outputs=("weights", "loss"), params={"lr": 0.5})
def step(values, jacobian, weights, lr):
    err = values[:, 0] - 0.5  # push <Z0 Z1> towards 0.5 for every sample
    grad = (2 * err[:, None] * jacobian[:, 0]).mean(axis=0)
    return weights - lr * grad, float((err**2).mean())


pipe.loop("step.weights", ["circuit.weights", "step.weights"], init=[0.1, 0.2])
pipe.output("step.loss")
graph = pipe.build()
print(graph)

rng = np.random.default_rng(0)
result = hq.run(graph, [{"x": rng.uniform(0, np.pi, (16, 2))} for _ in range(40)])
print(f"loss {result.column('loss')[0]:.4f} -> {result.column('loss')[-1]:.4f}")
