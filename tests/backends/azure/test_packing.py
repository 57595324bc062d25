"""Packing on Azure (issue 25), checked without a service: the Quil format, the parameter bindings of a
packed service job, a round trip per input format through the loopback service's runner (no Azurite),
the chunks and their ids, the target table's limits, and list prices."""
import json
import math
import numpy as np
import pytest

pytest.importorskip("azure.quantum", reason="needs the azure extra: pip install 'hqflow[azure]'")

from hqflow.backends import BackendError, CircuitBatch, Usage, get_backend  # noqa: E402
from hqflow.backends.azure import loopback_run  # noqa: E402
from hqflow.backends.azure import translate as T  # noqa: E402
from hqflow.backends.azure.cost import limits, list_price, load_prices  # noqa: E402
from hqflow.backends.azure.results import OutputError, counts_of, counts_of_bindings, estimate  # noqa: E402
from hqflow.ir import Circuit  # noqa: E402


def _pair():
    c = Circuit(2, name="pair")
    x, w = c.inputs("x", 2), c.weights("w", 1)
    c.ry(x[0], 0).rx(x[1], 1).cx(0, 1).rz(w[0], 1).h(0)
    return c.build(observables=["Z0", "X1", "Z0 Z1", "Y1"])  # three measurement groups


def _ising():
    """Every two-qubit rotation, which Quil writes as CNOT, RZ and basis changes (issue 34, item 10)."""
    c = Circuit(2, name="ising")
    x, w = c.inputs("x", 2), c.weights("w", 1)
    c.ry(x[0], 0).rx(x[1], 1).rxx(w[0], 0, 1).ryy(x[0], 0, 1).rzz(0.4, 1, 0)
    return c.build(observables=["Z0", "X1", "Z0 Z1", "Y1"])


def _exact(t, x, w):
    return get_backend("reference").run_checked(CircuitBatch.make(t, x, w)).values


QUIL_GOLDEN = """DECLARE ro BIT[3]
DECLARE theta REAL[2]
RY(theta[0]) 0
RX(0.5) 1
DAGGER S 2
DAGGER T 0
CCNOT 0 1 2
CZ 1 2
SWAP 0 1
RZ(theta[1]) 2
DAGGER S 1
H 1
H 2
MEASURE 0 ro[0]
MEASURE 1 ro[1]
MEASURE 2 ro[2]
"""


def test_quil_text_golden_and_the_bindings_of_each_row():
    c = Circuit(3, name="golden")
    x, w = c.inputs("x", 1), c.weights("w", 1)
    c.ry(2 * x[0] + 0.25, 0).rx(0.5, 1).sdg(2).tdg(0).ccx(0, 1, 2).cz(1, 2).swap(0, 1).rz(w[0], 2)
    t = c.build(observables=["Y1 X2"])  # one group: Y on 1, X on 2
    p = T.Payloads(t, T.FORMATS["quil"])
    batch = CircuitBatch.make(t, [[0.1], [0.2], [0.3]], [0.7])
    texts, subs = p.bindings(batch, 1, 3)
    assert [b.decode() for b in texts] == [QUIL_GOLDEN]
    assert subs == {"theta": [[2 * 0.2 + 0.25, 0.7], [2 * 0.3 + 0.25, 0.7]]}  # rows 1 and 2, affine slots
    row = p.rows(batch)[0][0].decode()  # one row as its own program: the values written in
    assert "RY(0.45) 0" in row and "RZ(0.7) 2" in row and "theta[" not in row


def test_rxx_ryy_rzz_are_written_in_quils_gates_exactly():
    """34.10: rxx, ryy and rzz were refused with Quil. As CNOT, RZ and basis changes they keep the state exactly
    (not only up to a global phase), and a Payloads of them is Quil's standard gates alone."""
    from hqflow.backends.reference import simulate
    from hqflow.ir.circuit import CircuitTemplate

    c = Circuit(3, name="ising")
    x, w = c.inputs("x", 3), c.weights("w", 3)
    c.ry(x[0], 0).rx(x[1], 1).h(2).ry(x[2], 2)
    c.rxx(w[0], 0, 1).ryy(w[1], 1, 2).rzz(w[2], 2, 0).ryy(0.7, 0, 2).rxx(x[0], 2, 1)
    t = c.build(observables=["Z0", "X1 X2", "Y0 Y1", "Z1 Z2"])
    ops = tuple(q for op in t.ops for q in T._quil_ops(op))
    assert {op.name for op in ops} <= set(T._QUIL)
    quil = CircuitTemplate(t.n_qubits, ops, t.input_names, t.weight_names, name=t.name)
    rng = np.random.default_rng(3)
    x, w = rng.uniform(-np.pi, np.pi, (5, 3)), rng.uniform(-np.pi, np.pi, 3)
    np.testing.assert_allclose(simulate(CircuitBatch.make(quil, x, w)), simulate(CircuitBatch.make(t, x, w)),
                               atol=1e-12)
    text = T.Payloads(t, T.FORMATS["quil"]).bindings(CircuitBatch.make(t, x, w), 0, 5)[0][0].decode()
    assert "CNOT" in text and "RXX" not in text and "RZZ" not in text and "RYY" not in text


def test_bindings_are_only_quils():
    with pytest.raises(BackendError, match="no parameter bindings"):
        T.Payloads(_pair(), T.FORMATS["ionq"]).bindings(CircuitBatch.make(_pair(), [[0, 0]], [0]), 0, 1)


TARGET = {"ionq": "ionq.simulator", "qasm": "quantinuum.sim.h2-1e", "qir": "rigetti.sim.qvm",
          "quil": "rigetti.sim.qvm"}


@pytest.mark.parametrize("kind, circuit", [("ionq", _pair), ("qasm", _pair), ("qir", _pair), ("quil", _pair),
                                           ("quil", _ising)])
def test_round_trip_per_format_through_the_loopback_runner(kind, circuit, sampled):
    """Payloads -> the loopback service's runner -> the results reader: the same values within 5 sigma."""
    t, fmt, shots = circuit(), T.FORMATS[kind], 4000
    rng = np.random.default_rng(len(kind))
    x, w = rng.uniform(-np.pi, np.pi, (6, 2)), rng.uniform(-np.pi, np.pi, 1)
    batch = CircuitBatch.make(t, x, w, shots=shots, seed=1)
    p = T.Payloads(t, fmt)
    counts = [[None] * len(p.groups) for _ in range(batch.size)]
    if kind == "quil":
        texts, subs = p.bindings(batch, 0, batch.size)
        for g, text in enumerate(texts):
            out = loopback_run.run(fmt.input_data_format, text, TARGET[kind], shots, rng, {"substitutions": subs})
            out = json.loads(json.dumps(out))  # as it travels
            for r, c in enumerate(counts_of_bindings(out, t.n_qubits, shots, batch.size)):
                counts[r][g] = c
    else:
        params = {"items": [{"entryPoint": "ENTRYPOINT__main", "arguments": []}]} if kind == "qir" else {}
        for r, row in enumerate(p.rows(batch)):
            for g, body in enumerate(row):
                out = loopback_run.run(fmt.input_data_format, body, TARGET[kind], shots, rng, params)
                counts[r][g] = counts_of(fmt, json.dumps(out), t.n_qubits, shots, rng, True)
    exact = _exact(t, x, w)
    for r in range(batch.size):
        assert all(sum(c.values()) == shots for c in counts[r])
        vals, errs = estimate(t, p.groups, counts[r])
        assert np.all(errs >= 0) and sampled.within(vals, exact[r], shots) == 1.0, (kind, r, vals, exact[r])


def test_the_quil_reader_cuts_set_major_shots_and_refuses_a_wrong_length():
    ro = [[0, 1]] * 3 + [[1, 1], [1, 0], [1, 0]]  # two sets of three shots
    assert counts_of_bindings({"ro": ro}, 2, 3, 2) == [{"01": 3}, {"11": 1, "10": 2}]
    with pytest.raises(OutputError, match="has 6 measurement vectors; expected 4 parameter sets x 3 shots = 12"):
        counts_of_bindings(json.dumps({"ro": ro}), 2, 3, 4)
    with pytest.raises(OutputError, match="cannot read"):
        counts_of_bindings({"c": ro}, 2, 3, 2)


QUIL_OK = b"DECLARE ro BIT[1]\nDECLARE theta REAL[1]\nRX(theta[0]) 0\nMEASURE 0 ro[0]\n"


@pytest.mark.parametrize("data, params, match", [
    (QUIL_OK, {"substitutions": {"theta": [[0.1], [0.2, 0.3]]}}, "set 1 of 'theta' must be 1 finite numbers"),
    (QUIL_OK, {"substitutions": {"theta": [[0.1]], "beta": [[1.0], [2.0]]}}, "same number of sets"),
    (QUIL_OK, {"substitutions": {"beta": [[1.0]]}}, "does not declare REAL"),
    (QUIL_OK, {"substitutions": {"theta": [["x"]]}}, "finite numbers"),
    (QUIL_OK, {}, r"theta\[0\] has no value"),
    (QUIL_OK.replace(b"RX(theta[0]) 0", b"PRAGMA whatever"), {}, "line 3"),
    (QUIL_OK.replace(b"RX(theta[0]) 0", b"XY(0.1) 0 1"), {}, "not Quil that this service runs"),
    (QUIL_OK.replace(b"ro[0]", b"ro[4]"), {}, "not in the declared BIT register ro"),
])
def test_the_loopback_runner_refuses_bad_quil_and_bad_substitutions(data, params, match):
    with pytest.raises(loopback_run.BadInput, match=match):
        loopback_run.run("rigetti.quil.v1", data, "rigetti.sim.qvm", 10, np.random.default_rng(0), params)


def test_the_loopback_runner_reads_literals_pi_and_daggers():
    text = b"DECLARE ro BIT[2]\nRX(pi) 0\nDAGGER RX(-pi/2) 1\nRX(-pi/2) 1\nMEASURE 0 ro[0]\nMEASURE 1 ro[1]\n"
    out = loopback_run.run("rigetti.quil.v1", text, "rigetti.sim.qvm", 50, np.random.default_rng(0))
    assert out == {"ro": [[1, 0]] * 50}  # X on 0; RX(pi/2) then RX(-pi/2) on 1


def test_the_loopback_runner_takes_one_qir_item_per_job():
    with pytest.raises(loopback_run.BadInput, match="one item per job; got 2"):
        loopback_run.run("qir.v1", b"__quantum__", "rigetti.sim.qvm", 10, np.random.default_rng(0),
                         {"items": [{"entryPoint": "a"}, {"entryPoint": "b"}]})


def test_the_target_table_limits_with_their_sources(tmp_path):
    table = load_prices()
    assert table["version"] == 3 and table["date"] == "2026-11-29"
    assert {"packing", "max_shots", "read"} <= set(table["limits_source"])
    assert limits("ionq.qpu.aria-1", "ionq") == (1, 10000) and limits("ionq.simulator", "qir") == (1, None)
    assert limits("quantinuum.qpu.h2-1", "qasm") == (1, 10000) and limits("quantinuum.sim.h2-1e", "qasm") == (1, None)
    assert limits("rigetti.sim.qvm", "quil") == (None, 10000) and limits("rigetti.sim.qvm", "qir") == (1, 10000)
    assert limits("ionq.qpu.aria-1", "quil") == (1, 10000)  # a format not listed: one circuit per job
    assert limits("nowhere.qpu", "qir") == (1, None)
    assert "deprecated" in table["targets"]["ionq.qpu.aria-2"] and "deprecated" in table["targets"]["rigetti.qpu.ankaa-3"]
    assert "rigetti.qpu.cepheus-1-108q" in table["targets"]
    old = dict(version=1, date="2026-11-23", source="s", targets={"t.qpu": {"qubits": 5, "model": "free"}})
    (tmp_path / "v1.json").write_text(json.dumps(old))
    assert limits("t.qpu", "qir", str(tmp_path / "v1.json")) == (1, None)  # a version 1 table still reads
    (tmp_path / "v4.json").write_text(json.dumps(dict(old, version=4)))
    with pytest.raises(BackendError, match="version 4; hqflow reads versions 1, 2, 3"):
        load_prices(str(tmp_path / "v4.json"))


def test_the_backend_declares_the_tables_limits_and_refuses_too_many_shots():
    aria = get_backend("azure:ionq.qpu.aria-1")  # no workspace needed for any of this
    caps = aria.capabilities
    assert (caps.service_job_rows, caps.max_shots, caps.row_seeded) == (1, 10000, True)
    with pytest.raises(BackendError) as err:
        aria.submit(CircuitBatch.make(_pair(), [[0.1, 0.2]], [0.3], shots=20000))
    assert str(err.value) == ("ionq.qpu.aria-1 takes at most 10,000 shots per job (azure-quantum's target "
                              "configuration); got 20000")
    assert get_backend("azure:ionq.simulator").capabilities.max_shots is None
    quil = get_backend("azure:rigetti.sim.qvm", input_format="quil", max_bindings=16)
    assert quil.capabilities.service_job_rows == 16 and quil.capabilities.max_shots == 10000
    assert get_backend("azure:rigetti.sim.qvm").capabilities.service_job_rows == 1  # QIR stays the default
    with pytest.raises(BackendError, match="max_bindings"):
        get_backend("azure:rigetti.sim.qvm", input_format="quil", max_bindings=0)


def test_usage_before_a_job_runs():
    t = _pair()  # three measurement groups
    batch = CircuitBatch.make(t, np.zeros((40, 2)), [0.1], shots=300)
    quil = get_backend("azure:rigetti.sim.qvm", input_format="quil", max_bindings=16).usage(batch)
    assert quil == Usage(service_jobs=3 * 3, circuits=120, shots=120 * 300, cost=0.0, currency="USD")
    aria = get_backend("azure:ionq.qpu.aria-1")
    used, cost = aria.usage(batch), aria.estimate_cost(batch)
    assert (used.service_jobs, used.circuits, used.shots) == (120, 120, 120 * 300) == (cost.jobs, 120, 36000)
    assert used.cost == cost.amount and used.currency == "USD"
    unknown = get_backend("azure:rigetti.qpu.cepheus-1-108q", input_format="quil").usage(batch)
    assert unknown.service_jobs == 3 and math.isnan(unknown.cost)  # no list price is known: counted, cost unknown


@pytest.mark.parametrize("target, shots", [("ionq.qpu.aria-1", None), ("ionq.qpu.aria-1", 3000),
                                           ("quantinuum.qpu.h2-1", 200), ("quantinuum.sim.h2-1sc", 50),
                                           ("rigetti.sim.qvm", 100)])
def test_list_price_is_what_the_backend_estimates(target, shots):
    t = _pair()
    batch = CircuitBatch.make(t, np.zeros((5, 2)), [0.1], shots=shots)
    backend = get_backend(f"azure:{target}", shots=777)
    want = backend.estimate_cost(batch)
    got = list_price(target, batch, shots=None if shots else 777)
    assert got == want and got.jobs == 5 * 3
    if shots is None:
        with pytest.raises(BackendError, match="exact .*pass shots="):
            list_price(target, batch)


def test_list_price_refuses_what_it_cannot_price():
    batch = CircuitBatch.make(_pair(), np.zeros((2, 2)), [0.1], shots=100)
    with pytest.raises(BackendError, match="not in the price table.*known: .*ionq.qpu.aria-1"):
        list_price("ionq.qpu.aria-9", batch)
    with pytest.raises(BackendError, match="no price is known"):
        list_price("rigetti.qpu.cepheus-1-108q", batch)
    with pytest.raises(BackendError, match="shots must be a positive integer"):
        list_price("ionq.qpu.aria-1", batch, shots=0)
    packed = list_price("rigetti.sim.qvm", batch, input_format="quil")
    assert packed.amount == 0.0 and packed.jobs == 3  # both rows of each group in one service job
    assert math.isclose(list_price("ionq.qpu.aria-1", batch).amount, 2 * 3 * 97.5)  # the per-job minimum


def test_values_near_one_are_judged_by_the_exact_binomial_tail(sampled):
    """34.22: at 500 shots an exact value of 0.999 gives 500 agreeing shots 78% of the time: the estimate is 1.0 with
    a standard error of 0, which 5 standard errors refused (about 5% of the older tests' runs misfired so)."""
    exact, shots = np.array([0.999, -0.998, 0.2]), 500
    got = np.array([1.0, -1.0, 0.2 + 5.5 * np.sqrt((1 - 0.04) / shots)])
    stderr = np.sqrt(np.maximum(1 - got**2, 0) / (shots - 1))
    assert not np.all(np.abs(got - exact) <= 5 * stderr + 1e-9)  # the old rule misfires on the first two
    assert sampled.within(got[:2], exact[:2], shots) == 1.0  # which the tail takes
    assert sampled.within(got[2:], exact[2:], shots) == 0.0  # and 5.5 sigma off is still refused
    assert sampled.probability(0.0, 1e-4, 1000) and not sampled.probability(0.05, 1e-4, 1000)
