"""Service job ids and sampled values of the per-row path, pinned before packing was added (issue 25): a run
resumed across the change must find the service jobs it created before, and a batch without row seeds must
sample exactly as it did. The values were read from the loopback service on 2026-11-26 at ``af9700c``."""
from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("azure.quantum", reason="needs the azure extra: pip install 'hqflow[azure]'")

from hqflow.backends import BackendError, CircuitBatch, get_backend  # noqa: E402
from hqflow.backends.azure import packing  # noqa: E402
from hqflow.backends.azure import translate as T  # noqa: E402
from hqflow.ir import Circuit  # noqa: E402

DIGEST = "42f79164429097212dbbc9b92666415d"
IDS = {(0, 0): "2d8fb4f4-fd76-552f-aa6c-0c39997082f0", (0, 1): "0f0cc6aa-119b-56c8-a933-c56bd0b4d817",
       (1, 0): "dc8661a6-2340-5d16-8161-03ac53ee79a9", (1, 1): "d96b9d19-cd75-5302-99c7-aa67d6ea454f",
       (2, 0): "4ac63168-830a-5214-8ae6-69bb20ca0b2e", (2, 1): "6166ac3d-bdd8-5cf2-a27d-b0dd20a0f79c"}
RETRY_ID = "746b0216-0e7a-5936-98aa-3032dfd91a36"  # row 2, group 1, attempt 1, try 2
VALUES = [[1.0, -0.1], [0.96, -0.02], [0.14, 0.08]]


def _batch():
    c = Circuit(2, name="golden")
    x, w = c.inputs("x", 2), c.weights("w", 1)
    c.ry(x[0], 0).rx(x[1], 1).cx(0, 1).rz(w[0], 1)
    t = c.build(observables=["Z0", "X0 Z1"])  # two measurement groups
    x = np.array([[0.1, 0.2], [0.3, -0.4], [1.5, 2.5]])
    return replace(CircuitBatch.make(t, x, [0.7], shots=100, seed=9), key="run-g/execute/3")


def test_per_row_ids_and_sampled_values_are_the_ones_from_before_packing(azure_workspace, azure_service):
    backend = get_backend("azure:ionq.simulator", **azure_workspace, shots=100)
    try:
        job = backend.submit(_batch())
        res = job.result(timeout=60)
    finally:
        backend.close()
    assert sorted(job.job_ids) == sorted(IDS.values())
    assert azure_service.stats()["jobs"] == 6
    np.testing.assert_array_equal(res.values, np.array(VALUES))


def test_the_digest_of_a_batch_is_the_one_from_before_packing():
    from hqflow.backends.azure.backend import _digest

    assert _digest(_batch(), 100) == DIGEST


def test_per_row_ids_are_the_ones_from_before_packing_and_packed_ids_cannot_collide():
    key = "run-g/execute/3"
    for (r, g), want in IDS.items():
        assert packing.job_id(packing.id_base(key, DIGEST, r, r + 1, g), 0, 0) == want
    assert packing.job_id(packing.id_base(key, DIGEST, 2, 3, 1), 1, 2) == RETRY_ID
    packed = packing.id_base(key, DIGEST, 0, 16, 0)
    assert packed == f"{key}|{DIGEST}|0:16|0" and packed != packing.id_base(key, DIGEST, 0, 1, 0)
    assert packing.ranges(40, 16) == [(0, 16), (16, 32), (32, 40)] and packing.ranges(3, 1) == [(0, 1), (1, 2), (2, 3)]


def test_the_plan_of_a_batch_is_its_rows_per_format():
    batch = _batch()
    ionq = packing.plan(T.Payloads(batch.template, T.FORMATS["ionq"]), batch, batch.key, DIGEST, 1)
    assert [(c.lo, c.hi, c.group) for c in ionq] == [(r, r + 1, g) for r in range(3) for g in range(2)]
    assert all(c.params == {} for c in ionq)
    quil = packing.plan(T.Payloads(batch.template, T.FORMATS["quil"]), batch, batch.key, DIGEST, 2)
    assert [(c.lo, c.hi, c.group, c.label()) for c in quil] == [(0, 2, 0, "rows 0-1"), (0, 2, 1, "rows 0-1"),
                                                               (2, 3, 0, "row 2"), (2, 3, 1, "row 2")]
    assert [len(c.params["substitutions"]["theta"]) for c in quil] == [2, 2, 1, 1]
    assert quil[2].base == packing.id_base(batch.key, DIGEST, 2, 3, 0)  # a one-row chunk: the per-row form
    with pytest.raises(BackendError, match="one circuit per job"):
        packing.plan(T.Payloads(batch.template, T.FORMATS["ionq"]), batch, batch.key, DIGEST, 2)


def test_row_seeds_sample_each_row_from_its_own_seed():
    batch = _batch()
    seeded = replace(batch, row_seeds=np.array([11, 12, 13], dtype=np.uint64))
    a = packing.sampling_rng(seeded, 1, 0, "00000000-0000-0000-0000-000000000000").random()
    assert a == np.random.default_rng([12, 0]).random()
    assert packing.sampling_rng(batch, 1, 0, "x").random() == np.random.default_rng([9, 1, 0]).random()  # as before
