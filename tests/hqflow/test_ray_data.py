"""Data movement under the ray executor: a value that only a later fragment reads goes worker to
worker through Ray's object store, never through the driver; the run counts the bytes each way."""
import numpy as np
import pytest

import hqflow as hq

pytestmark = pytest.mark.ray
pytest.importorskip("ray")

BIG = 1_000_000  # bytes of the intermediate array


def make(seed):
    return {"big": np.random.default_rng(int(seed)).random(BIG // 8)}


def digest(big):
    return {"total": float(np.sum(big))}


def _graph(big_is_an_output: bool = False):
    pipe = hq.Pipeline("big_intermediate")
    pipe.input("seed", "scalar")
    pipe.preprocess(make, name="make", inputs={"seed": "scalar"}, outputs={"big": "any"})
    pipe.postprocess(digest, name="digest", inputs={"big": "any"}, outputs={"total": "scalar"})
    if big_is_an_output:
        pipe.output("make.big")
    pipe.output("digest.total")
    return pipe.build()


def test_an_intermediate_goes_worker_to_worker_not_through_the_driver():
    stream = [{"seed": k} for k in range(3)]
    ref = hq.run(_graph(), stream, executor="sync")
    res = hq.run(_graph(), stream, executor="ray", ray_num_cpus=2, cpu_workers=2)
    assert res.outputs == ref.outputs
    moved = res.extra["bytes_moved"]
    assert moved["worker_to_worker"] >= 3 * BIG  # each step's array, taken by its digest
    assert moved["driver_to_workers"] < 50_000 and moved["workers_to_driver"] < 50_000, moved
    assert ref.extra["bytes_moved"] == {"driver_to_workers": 0, "workers_to_driver": 0, "worker_to_worker": 0,
                                        "reduce": 0}


def test_a_kept_value_that_is_also_a_graph_output_comes_to_the_driver():
    res = hq.run(_graph(big_is_an_output=True), [{"seed": 1}], executor="ray", ray_num_cpus=2)
    assert isinstance(res.outputs[0]["big"], np.ndarray) and res.outputs[0]["big"].nbytes == BIG
    assert res.extra["bytes_moved"]["workers_to_driver"] >= BIG
