"""The loopback Azure Quantum service, through the real azure-quantum SDK over real HTTP (Azurite
holds the blobs), and its three input formats against exact values. Nothing in the SDK is patched.
"""
import json
import math
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

pytest.importorskip("azure.quantum", reason="needs the azure extra: pip install 'hqflow[azure]'")

from azure.core.credentials import AzureKeyCredential  # noqa: E402
from azure.core.exceptions import HttpResponseError  # noqa: E402
from azure.quantum import Job, Workspace  # noqa: E402
from azure.quantum.job.session import Session  # noqa: E402

from hqflow.backends.azure import loopback_run as run  # noqa: E402

THETA = 1.1
C2, S2 = math.cos(THETA / 2) ** 2, math.sin(THETA / 2) ** 2
IONQ = dict(provider_id="ionq", input_data_format="ionq.circuit.v1", output_data_format="ionq.quantum-results.v1",
            content_type="application/json")
QASM = dict(provider_id="quantinuum", input_data_format="honeywell.openqasm.v1",
            output_data_format="honeywell.quantum-results.v1", content_type="application/qasm")
QIR = dict(provider_id="rigetti", input_data_format="qir.v1", output_data_format="microsoft.quantum-results.v2",
           content_type="qir.v1")
# Bell pair on qubits 0, 1 and rx(THETA) on qubit 2
BELL_RX = {"gateset": "qis", "qubits": 3, "circuit": [
    {"gate": "h", "targets": [0]}, {"gate": "cnot", "controls": [0], "targets": [1]},
    {"gate": "rx", "targets": [2], "rotation": THETA}]}
# x on q[0], rx(THETA) on q[1] (register a), h on q[2] (register b)
QASM_TEXT = f"""OPENQASM 2.0;
include "qelib1.inc";
qreg q[3];
creg a[2];
creg b[1];
x q[0];
rx({THETA}) q[1];
h q[2];
measure q[0] -> a[0];
measure q[1] -> a[1];
measure q[2] -> b[0];
"""


def _ws(options, key=None):
    return Workspace(subscription_id=options["subscription_id"], resource_group=options["resource_group"],
                     name=options["name"], location=options["location"],
                     credential=AzureKeyCredential(key or options["key"]), _quantum_endpoint=options["endpoint"])


def _submit(ws, target, data, fmt, params, job_id=None, **kw):
    return Job.from_input_data(ws, name="loopback-test", target=target, input_data=data, input_params=params,
                               job_id=job_id or str(uuid.uuid4()), **fmt, **kw)


def _done(job, timeout=30):
    job.wait_until_completed(print_progress=False, timeout_secs=timeout, max_poll_wait_secs=1)
    return job




def _qir_text():
    from qiskit import QuantumCircuit
    from qdk import TargetProfile
    from qdk.qiskit import QSharpBackend

    qc = QuantumCircuit(2, 2)
    qc.x(0)
    qc.rx(THETA, 1)
    qc.measure([0, 1], [0, 1])
    return QSharpBackend(target_profile=TargetProfile.Base, skip_transpilation=True).qir(qc)


# --- the three formats, through the SDK ------------------------------------------------------

def test_ionq_simulator_returns_exact_probabilities_and_the_qpu_samples(azure_workspace, sampled):
    ws = _ws(azure_workspace)
    data = json.dumps(BELL_RX).encode()
    sim = _submit(ws, "ionq.simulator", data, IONQ, {"shots": 100})
    qpu = _submit(ws, "ionq.qpu.aria-1", data, IONQ, {"shots": 2000})
    hist = _done(sim).get_results()["histogram"]
    # bit i of the key is qubit i: |q2 q1 q0> = |000>, |011>, |100>, |111>
    expected = {"0": C2 / 2, "3": C2 / 2, "4": S2 / 2, "7": S2 / 2}
    assert hist.keys() == expected.keys()
    assert all(abs(hist[k] - v) < 1e-12 for k, v in expected.items())
    freq = _done(qpu).get_results()["histogram"]
    # the QPU emulates Aria: under its local noise model where hqflow's density backend has one, else ideal
    noise = run.device_noise("ionq.qpu.aria-1", run.parse_ionq(data))
    probs = run.parse_ionq(data).probabilities(noise)
    exact = {str(int(f"{i:03b}"[::-1], 2)): p for i, p in enumerate(probs)}  # bit i of IonQ's key is qubit i
    assert set(freq) <= ({k for k, p in exact.items() if p > 0} if noise else set(expected))
    assert abs(sum(freq.values()) - 1) < 1e-9 and all(sampled.probability(freq.get(k, 0.0), v, 2000)
                                                       for k, v in exact.items())
    assert all(abs(v * 2000 - round(v * 2000)) < 1e-6 for v in freq.values())  # frequencies of 2000 shots


def test_quantinuum_qasm_per_shot_strings_with_bit_zero_rightmost(azure_workspace, sampled):
    ws = _ws(azure_workspace)
    job = _done(_submit(ws, "quantinuum.sim.h2-1e", QASM_TEXT.encode(), QASM, {"count": 1000}))
    out = job.get_results()
    assert set(out) == {"a", "b"} and len(out["a"]) == len(out["b"]) == 1000
    assert all(len(s) == 2 and s[1] == "1" for s in out["a"])  # a[0] (x q[0]) is the rightmost character
    assert sampled.probability(sum(s[0] == "1" for s in out["a"]) / 1000, S2, 1000)
    assert sampled.probability(sum(s == "1" for s in out["b"]) / 1000, 0.5, 1000)
    checker = _done(_submit(ws, "quantinuum.sim.h2-1sc", QASM_TEXT.encode(), QASM, {"count": 5})).get_results()
    assert checker == {"a": ["00"] * 5, "b": ["0"] * 5}


def test_qir_from_the_sdks_qiskit_tooling(azure_workspace, sampled):
    ws = _ws(azure_workspace)
    job = _done(_submit(ws, "rigetti.sim.qvm", _qir_text().encode(), QIR,
                        {"shots": 1000, "items": [{"entryPoint": "ENTRYPOINT__main", "arguments": []}]}))
    shots = job.get_results_shots()
    # Qiskit's QIR records clbit 1 before clbit 0: each shot is [c1, c0], and c0 (x) is always 1
    assert len(shots) == 1000 and all(len(s) == 2 and s[1] == 1 for s in shots)
    probs = job.get_results()
    assert set(probs) <= {"[0, 1]", "[1, 1]"}
    assert sampled.probability(probs.get("[1, 1]", 0.0), S2, 1000)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the SDK's own, from its Qiskit provider
def test_the_sdks_qiskit_backends_read_every_format(azure_workspace, sampled):
    from azure.quantum.qiskit import AzureQuantumProvider
    from qiskit import QuantumCircuit

    qc = QuantumCircuit(3, 3)
    qc.x(0)
    qc.h(1)
    qc.cx(1, 2)
    qc.measure([0, 1, 2], [0, 1, 2])
    provider = AzureQuantumProvider(_ws(azure_workspace))
    backends = [provider.get_backend("ionq.simulator", input_data_format="ionq.circuit.v1", gateset="qis"),
                provider.get_backend("quantinuum.sim.h2-1e", input_data_format="honeywell.openqasm.v1"),
                provider.get_backend("rigetti.sim.qvm")]  # QIR
    for backend in backends:
        counts = backend.run(qc, shots=400).result().get_counts()
        assert set(counts) == {"001", "111"} and sum(counts.values()) == 400, backend.name
        assert sampled.probability(counts["111"] / 400, 0.5, 400), backend.name


def test_same_job_id_twice_runs_once(azure_workspace, azure_service):
    ws = _ws(azure_workspace)
    job = _submit(ws, "ionq.simulator", json.dumps(BELL_RX).encode(), IONQ, {"shots": 10})
    again = ws.submit_job(job)  # the same PUT: the service answers with the existing job
    assert again.id == job.id
    _done(job)
    stats = azure_service.stats()
    assert stats["jobs"] == 1 and stats["runs"] == {job.id: 1} and stats["duplicated"] == 0


def test_a_dropped_answer_to_a_job_put_is_retried_by_the_sdk_and_runs_once(azure_workspace, azure_service):
    ws = _ws(azure_workspace)
    job_id = str(uuid.uuid4())
    container = ws.get_container_uri(job_id=job_id)
    uri = Job.upload_input_data(container, json.dumps(BELL_RX).encode(), content_type="application/json")
    p, seed = 0.5, next(s for s in range(100) if list(np.random.default_rng(s).random(2) < 0.5) == [True, False])
    azure_service.configure(drop_connection=p, seed=seed)  # the PUT is answered by a closed socket, its retry not
    job = Job.from_storage_uri(ws, name="dropped", target="ionq.simulator", input_data_uri=uri,
                               container_uri=container, job_id=job_id, input_params={"shots": 10},
                               **{k: v for k, v in IONQ.items() if k != "content_type"})
    azure_service.configure(drop_connection=0.0)
    assert _done(job).details.status == "Succeeded"
    stats = azure_service.stats()
    assert stats["faults"]["drop_connection"] == 1 and stats["runs"] == {job_id: 1}


# --- failures ---------------------------------------------------------------------------------

def test_a_wrong_key_is_unauthorized(azure_workspace, azure_service):
    ws = _ws(azure_workspace, key="not-the-key")
    with pytest.raises(HttpResponseError, match="Unauthorized") as info:
        ws.get_job(str(uuid.uuid4()))
    assert info.value.status_code == 401
    assert azure_service.stats()["requests"] == 0  # refused before it counts


def _seed_hitting_first(p, draws=10):
    """A seed whose fault draws hit on the first request only (each request draws once)."""
    return next(s for s in range(1000) if list(np.random.default_rng(s).random(draws) < p) == [True] + [False] * 9)


@pytest.mark.parametrize("fault", ["http_503", "http_429"])
def test_503_and_429_answers_are_retried_by_the_sdk(azure_workspace, azure_service, fault):
    ws = _ws(azure_workspace)
    # azure-core retries 503 on any method, and 429 on any method when Retry-After is present
    azure_service.configure(**{fault: 0.2}, seed=_seed_hitting_first(0.2))  # the container's POST is refused once
    job = _done(_submit(ws, "ionq.simulator", json.dumps(BELL_RX).encode(), IONQ, {"shots": 10}))
    stats = azure_service.stats()
    assert job.details.status == "Succeeded" and stats["faults"][fault] == 1 and stats["runs"] == {job.id: 1}


def test_an_expired_sas_uri_fails_the_upload(azure_workspace, azure_service):
    ws = _ws(azure_workspace)
    azure_service.configure(expired_sas=1.0)
    with pytest.raises(HttpResponseError) as info:
        _submit(ws, "ionq.simulator", json.dumps(BELL_RX).encode(), IONQ, {"shots": 10})
    assert info.value.status_code == 403 and "failed to authenticate" in str(info.value)
    assert azure_service.stats()["jobs"] == 0


def test_failed_jobs_carry_error_data(azure_workspace, azure_service):
    ws = _ws(azure_workspace)
    bad = _done(_submit(ws, "ionq.simulator", b'{"qubits": 1, "circuit": [{"gate": "gpi"}]}', IONQ, {"shots": 1}))
    assert bad.details.status == "Failed" and bad.details.error_data.code == "InvalidInputData"
    assert "not a gate of IonQ's qis gateset" in bad.details.error_data.message
    azure_service.configure(job_failure=1.0)
    job = _done(_submit(ws, "ionq.simulator", json.dumps(BELL_RX).encode(), IONQ, {"shots": 10}))
    assert job.details.status == "Failed" and job.details.error_data.code == "ExecutionFailed"
    with pytest.raises(RuntimeError, match="failed"):
        job.get_results()
    with pytest.raises(HttpResponseError, match="InvalidJobDefinition"):
        _submit(ws, "ionq.qpu.nowhere", json.dumps(BELL_RX).encode(), IONQ, {"shots": 10})


def test_a_cancelled_job_never_runs(azure_workspace, azure_service):
    ws = _ws(azure_workspace)
    azure_service.configure(latency=0.8)
    job = _submit(ws, "ionq.simulator", json.dumps(BELL_RX).encode(), IONQ, {"shots": 10})
    assert ws.cancel_job(job).details.status == "Cancelled"  # the service answers 204, as Azure does
    time.sleep(1.0)
    job.refresh()
    assert job.details.status == "Cancelled" and azure_service.stats()["runs"] == {}


def test_sessions_abort_after_a_failed_job_and_refuse_jobs_once_closed(azure_workspace, azure_service):
    ws = _ws(azure_workspace)
    data = json.dumps(BELL_RX).encode()
    session = Session(workspace=ws, target="ionq.simulator", job_failure_policy="Abort")
    ws.open_session(session)
    assert session.details.status == "Waiting"
    azure_service.configure(job_failure=1.0)
    failed = _done(_submit(ws, "ionq.simulator", data, IONQ, {"shots": 10}, session_id=session.id))
    assert failed.details.status == "Failed"
    ws.refresh_session(session)
    assert session.details.status == "Failed" and session.is_in_terminal_state()
    with pytest.raises(HttpResponseError, match="SessionFailed"):
        _submit(ws, "ionq.simulator", data, IONQ, {"shots": 10}, session_id=session.id)
    assert [j.id for j in ws.list_session_jobs(session.id)] == [failed.id]
    azure_service.configure(job_failure=0.0)
    other = Session(workspace=ws, target="ionq.simulator", job_failure_policy="Abort")
    ws.open_session(other)
    ok = _done(_submit(ws, "ionq.simulator", data, IONQ, {"shots": 10}, session_id=other.id))
    ws.close_session(other)
    assert ok.details.status == "Succeeded" and other.details.status == "Succeeded"
    with pytest.raises(HttpResponseError, match="SessionClosed"):
        _submit(ws, "ionq.simulator", data, IONQ, {"shots": 10}, session_id=other.id)
    assert azure_service.stats()["sessions"] == {session.id: "Failed", other.id: "Succeeded"}


def test_provider_status_lists_and_job_listing(azure_workspace, azure_service):
    ws = _ws(azure_workspace)
    targets = {(p, t.id) for p, t in ws._get_target_status()}
    assert {t for _, t in targets} == {"ionq.simulator", "ionq.qpu.aria-1", "ionq.qpu.forte-1",
                                       "quantinuum.sim.h2-1sc", "quantinuum.sim.h2-1e", "quantinuum.qpu.h2-1",
                                       "rigetti.sim.qvm", "rigetti.qpu.ankaa-3",
                                       "rigetti.qpu.cepheus-1-108q"}
    assert {p for p, _ in targets} == {"ionq", "quantinuum", "rigetti"}
    assert ws.get_quotas() == []
    a = _submit(ws, "ionq.simulator", json.dumps(BELL_RX).encode(), IONQ, {"shots": 10})
    b = _submit(ws, "quantinuum.sim.h2-1sc", QASM_TEXT.encode(), QASM, {"count": 1})
    assert {j.id for j in ws.list_jobs()} == {a.id, b.id}
    assert [j.id for j in ws.list_jobs(provider=["quantinuum"])] == [b.id]
    assert [j.id for j in ws.list_jobs_paginated(top=1)] == [a.id, b.id]  # two pages, nextLink followed
    assert ws.update_job(a, name="renamed", tags=["x"]).details.tags == ["x"]
    assert [j.id for j in ws.list_jobs(name_match="renamed")] == [a.id]
    _done(a), _done(b)
    stats = azure_service.stats()
    assert stats["jobs"] == 2 and stats["executions"] == 2 and stats["by_status"] == {"Succeeded": 2}
    assert stats["requests"] > 0 and set(stats["faults"]) == {"job_failure", "http_503", "http_429", "slow_job",
                                                              "hang_job", "expired_sas", "drop_connection", "lost_put"}
    assert stats["repeated_puts"] == 0


def test_jobs_overlap_in_the_service(azure_workspace, azure_service):
    ws = _ws(azure_workspace)
    azure_service.configure(run_seconds=1.0)
    data = json.dumps(BELL_RX).encode()
    with ThreadPoolExecutor(12) as pool:
        jobs = list(pool.map(lambda _: _done(_submit(ws, "ionq.simulator", data, IONQ, {"shots": 10})), range(12)))
    assert all(j.details.status == "Succeeded" for j in jobs)
    # 12 jobs of 1 s each ran side by side: by the service's own clock, several executed at once (not the
    # test's wall clock, which a busy machine stretches; a service that ran one job at a time gives 1)
    events = sorted([(j.details.begin_execution_time, 1) for j in jobs] + [(j.details.end_execution_time, -1)
                                                                           for j in jobs])
    running = [sum(d for _, d in events[:k + 1]) for k in range(len(events))]
    assert max(running) >= 2


def test_the_key_is_never_printed_nor_on_the_command_line(azure_workspace, azure_service):
    ws = _ws(azure_workspace)
    _done(_submit(ws, "ionq.simulator", b"not json", IONQ, {"shots": 1}))
    with pytest.raises(HttpResponseError):
        _ws(azure_workspace, key="wrong").get_job("x")
    assert azure_workspace["key"] not in azure_service.output()
    with open(f"/proc/{azure_service.proc.pid}/cmdline", "rb") as f:
        assert azure_workspace["key"].encode() not in f.read()


# --- the formats, without the service ---------------------------------------------------------

def _qiskit_probs(qc):
    """Probabilities indexed as IonQ's integers (qubit i at bit i), from Qiskit's statevector."""
    from qiskit.quantum_info import Statevector

    return Statevector(qc.remove_final_measurements(inplace=False)).probabilities()


def _random_qiskit(rng, n=4, depth=30):
    from qiskit import QuantumCircuit
    from qiskit.circuit.library import PauliEvolutionGate
    from qiskit.quantum_info import SparsePauliOp

    qc = QuantumCircuit(n, n)
    one = ["h", "x", "y", "z", "s", "sdg", "t", "tdg", "sx", "sxdg"]
    for _ in range(depth):
        a, b, c, d = (int(q) for q in rng.permutation(n))
        r = float(rng.uniform(-3, 3))
        pick = int(rng.integers(0, 20))
        if pick < len(one):
            getattr(qc, one[pick])(a)
        else:
            [lambda: qc.rx(r, a), lambda: qc.ry(r, a), lambda: qc.rz(r, a), lambda: qc.cx(a, b), lambda: qc.cz(a, b),
             lambda: qc.swap(a, b), lambda: qc.ccx(a, b, c), lambda: qc.rxx(r, a, b), lambda: qc.rzz(r, a, b),
             lambda: qc.mcx([a, b, c], d)][pick - len(one)]()
    qc.append(PauliEvolutionGate(SparsePauliOp(["XZ", "ZX"], [0.3, 0.7]), time=0.4), [0, 2])
    qc.cy(0, 1)
    qc.crx(0.3, 2, 0)
    qc.ch(1, 3)
    qc.csx(3, 0)
    qc.measure(range(n), range(n))
    return qc


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the SDK's qiskit package imports qsharp
@pytest.mark.filterwarnings("ignore:.*CSC")  # scipy, inside Qiskit's PauliEvolutionGate matrix
def test_ionq_json_from_the_sdks_converter_matches_qiskit():
    from azure.quantum.qiskit.backends._qiskit_ionq import qiskit_circ_to_ionq_circ

    rng = np.random.default_rng(11)
    for _ in range(6):
        qc = _random_qiskit(rng)
        circ, _, _ = qiskit_circ_to_ionq_circ(qc, gateset="qis")
        doc = json.dumps({"gateset": "qis", "qubits": 4, "circuit": circ}).encode()
        hist = run.run("ionq.circuit.v1", doc, "ionq.simulator", 1, rng)["histogram"]
        got = np.zeros(16)
        for k, v in hist.items():
            got[int(k)] = v
        np.testing.assert_allclose(got, _qiskit_probs(qc), atol=1e-10)


@pytest.mark.filterwarnings("ignore:.*CSC")
def test_qasm_and_qir_programs_match_qiskit():
    from qiskit import qasm2, transpile
    from qdk import TargetProfile
    from qdk.qiskit import QSharpBackend

    rng = np.random.default_rng(12)
    order = [int(f"{i:04b}"[::-1], 2) for i in range(16)]  # wire 0 most significant -> qubit 0 at bit 0
    qir = QSharpBackend(target_profile=TargetProfile.Base, skip_transpilation=True)
    for _ in range(3):
        qc = _random_qiskit(rng)
        expected = _qiskit_probs(qc)[order]
        # optimization level 0: higher levels may elide swaps and permute the output qubits
        lowered = transpile(qc, basis_gates=["u", "cx", "rzz", "ccx", "cp"], optimization_level=0)
        prog, _ = run.parse_qasm(qasm2.dumps(lowered).encode())
        np.testing.assert_allclose(prog.probabilities(), expected, atol=1e-10)
        text = qir.qir(transpile(qc, basis_gates=["h", "x", "s", "sdg", "t", "tdg", "rx", "ry", "rz", "cx", "cz",
                                                  "swap", "ccx", "rxx", "rzz"], optimization_level=0))
        prog, records = run.parse_qir(text.encode())
        np.testing.assert_allclose(prog.probabilities(), expected, atol=1e-10)
        assert records == [("array", 4), ("result", 3), ("result", 2), ("result", 1), ("result", 0)]


def test_qir_bitcode_and_tuples_of_registers():
    import pyqir
    from qiskit import ClassicalRegister, QuantumCircuit, QuantumRegister
    from qdk import TargetProfile
    from qdk.qiskit import QSharpBackend

    qc = QuantumCircuit(QuantumRegister(3), ClassicalRegister(2, "a"), ClassicalRegister(1, "b"))
    qc.x(0)
    qc.x(2)
    qc.measure([0, 1, 2], [0, 1, 2])
    text = QSharpBackend(target_profile=TargetProfile.Base, skip_transpilation=True).qir(qc)
    bitcode = pyqir.Module.from_ir(pyqir.Context(), text).bitcode
    for data in (text.encode(), bitcode):
        out = run.run("qir.v1", data, "rigetti.sim.qvm", 3, np.random.default_rng(0))
        (result,) = out["Results"]
        # registers last first, each highest bit first: b = [1], a = [a1, a0] = [0, 1]
        assert result["Shots"] == [{"Item1": [1], "Item2": [0, 1]}] * 3
        assert result["Histogram"] == [{"Outcome": {"Item1": [1], "Item2": [0, 1]}, "Display": "([1], [0, 1])",
                                        "Count": 3}]


@pytest.mark.parametrize("fmt, data, message", [
    ("ionq.circuit.v1", b"{", "not an ionq.circuit.v1 document"),
    ("ionq.circuit.v1", b'{"gateset": "native", "qubits": 1, "circuit": []}', "gateset 'native'"),
    ("ionq.circuit.v1", b'{"qubits": 2, "circuit": [{"gate": "h", "targets": [2]}]}', "not all in 0..1"),
    ("ionq.circuit.v1", b'{"qubits": 1, "circuit": [{"gate": "rx", "targets": [0]}]}', "needs a 'rotation'"),
    ("ionq.circuit.v1", b'{"qubits": 1, "circuit": [{"gate": "z", "targets": [0], "rotation": 1}]}', "no rotation"),
    ("honeywell.openqasm.v1", b"OPENQASM 2.0; qreg q[1]; foo q[0];", "not OpenQASM 2"),
    ("honeywell.openqasm.v1", b'OPENQASM 2.0; include "qelib1.inc"; qreg q[1]; creg c[1]; measure q[0] -> c[0];'
                              b" h q[0];", "after it was measured"),
    ("qir.v1", b"define void @main() { ret void }", "not QIR"),
    ("qir.v1", b"call void @__quantum__qis__foo__body(%Qubit* null)", "not supported here"),
    ("text.v1", b"", "input format 'text.v1' is not supported"),
])
def test_malformed_inputs_say_what_is_wrong(fmt, data, message):
    with pytest.raises(run.BadInput, match=message):
        run.run(fmt, data, "ionq.simulator", 10, np.random.default_rng(0))
