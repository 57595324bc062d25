"""What ``azure:<target>`` refuses at once, in one line, before anything is sent (issue 34): a base install
without the azure extra, options that would do nothing, and the like. None of these needs the loopback service."""
import sys

import pytest

from hqflow.backends import BackendAccessError, BackendError, get_backend
from hqflow.cli import main


@pytest.fixture
def no_sdk(monkeypatch):
    """This process as a base install sees it: the SDK's modules cannot be imported."""
    for module in ("azure", "azure.quantum", "azure.storage.blob", "azure.identity"):
        monkeypatch.setitem(sys.modules, module, None)


def test_a_base_install_names_the_extra_at_once(no_sdk, capsys):
    """34.12: without the azure extra a dry run retried for 11 s, then reported RetriesExhausted."""
    with pytest.raises(BackendAccessError, match=r'pip install "hqflow\[azure\]"'):
        get_backend("azure:ionq.qpu.aria-1")
    code = main(["train", "cartpole", "--backend", "azure:ionq.qpu.aria-1", "--shots", "1000", "--dry-run"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and 'pip install "hqflow[azure]"' in err[0], err


@pytest.mark.parametrize("target, options, names", [
    ("ionq.qpu.aria-1", {"input_format": "quil"}, ["input_format 'quil'", "ionq targets take ionq or qir"]),
    ("quantinuum.sim.h2-1e", {"input_format": "ionq"}, ["input_format 'ionq'", "quantinuum targets take qasm"]),
    ("ionq.simulator", {"max_bindings": 16}, ["max_bindings", "would do nothing"]),
    ("rigetti.sim.qvm", {"max_bindings": 16}, ["max_bindings", "input_format='quil'"]),
    ("ionq.simulator", {"job_failure_policy": "Continue"}, ["job_failure_policy", "session=True"]),
    ("ionq.simulator", {"session": True, "job_failure_policy": "Abort"}, ["'Abort'", "no row could be retried"]),
])
def test_options_that_would_do_nothing_or_defeat_retries_are_refused(target, options, names):
    """34.8: input_format=quil on IonQ made 26 failed service jobs of a 4-row batch; max_bindings beside a format
    that does not pack was taken silently. 34.13: a session that aborts at the first failure defeats job_tries."""
    with pytest.raises(BackendError) as err:
        get_backend(f"azure:{target}", **options)
    assert "\n" not in str(err.value) and all(n in str(err.value) for n in names), err.value


def test_what_may_be_given_still_is():
    assert get_backend("azure:rigetti.sim.qvm", input_format="quil", max_bindings=16).rows_per_job == 16
    assert get_backend("azure:ionq.simulator", input_format="qir").format.kind == "qir"
    assert get_backend("azure:ionq.simulator", session=True).job_failure_policy == "Continue"


@pytest.mark.parametrize("name, options, said", [
    ("azure:ionq.simulator", {"fidelity": {}, "location": "x"}, "unknown option 'fidelity'; it takes target, "),
    ("azure:ionq.simulator", {"shot": 5}, "unknown option 'shot' (did you mean 'shots'?)"),
    ("emulated-qpu", {"per_jbo": 0.1}, "unknown option 'per_jbo' (did you mean 'per_job'?)"),
    ("reference", {"colour": "red"}, "unknown option 'colour'; it takes max_qubits"),
])
def test_an_unknown_option_is_named_with_the_nearest_known_one(name, options, said):
    """34.8: the message listed every option given (bad options ['endpoint', 'key', 'location', ...]), not the bad
    one."""
    with pytest.raises(BackendError) as err:
        get_backend(name, **options)
    assert said in str(err.value) and "location" not in str(err.value).split("it takes")[0], err.value


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("backend", [["azure:ionq.qpu.aria-1", "--dry-run"],
                                     ["emulated-qpu", "--backend-opt", "price_as=ionq.qpu.aria-1", "--dry-run"],
                                     ["emulated-qpu", "--backend-opt", "price_as=ionq.qpu.aria-1"],
                                     ["emulated-qpu", "--backend-opt", "max_shots=100", "--episodes", "1"]])
def test_shots_over_the_targets_cap_are_refused_at_the_start(backend, capsys, tmp_path, monkeypatch):
    """34.4: --dry-run priced 20,000 shots on Aria (cap 10,000) at $21M and exited 0; a real run retried 4 times."""
    monkeypatch.chdir(tmp_path)
    cap = "100" if "max_shots=100" in backend else "10,000"
    code = main(["train", "cartpole", "--backend", *backend, "--shots", "20000"])
    line = _one_line(capsys)
    assert code == 2 and f"takes at most {cap} shots per job; got 20000" in line, line


def test_shots_over_the_cap_are_never_retried():
    """34.4: the refusal at submit is a RequestRefused (retryable False): the runtime ends the run at once."""

    from hqflow.backends import CircuitBatch, RequestRefused
    from hqflow.ir import Circuit

    c = Circuit(1, name="one")
    c.ry(c.inputs("x", 1)[0], 0)
    batch = CircuitBatch.make(c.build(observables=["Z0"]), [[0.1]], shots=20000)
    for backend in (get_backend("azure:ionq.qpu.aria-1"), get_backend("emulated-qpu", price_as="ionq.qpu.aria-1")):
        assert backend.capabilities.max_shots == 10000
        with pytest.raises(RequestRefused) as err:
            backend.submit(batch)
        assert not err.value.retryable
        backend.close()
    with pytest.raises(BackendError, match="shots=20000: ionq.qpu.aria-1 takes at most 10,000"):
        get_backend("azure:ionq.qpu.aria-1", shots=20000)  # the option, for an exact batch
    from hqflow.backends.dryrun import DryRunBackend

    with pytest.raises(RequestRefused, match="a real submit would refuse"):
        DryRunBackend("azure:ionq.qpu.aria-1").submit(batch)


CEPHEUS = ["--backend", "azure:rigetti.qpu.cepheus-1-108q", "--backend-opt", "input_format=quil"]


@pytest.mark.parametrize("flag", [["--dry-run"], ["--budget", "1000"]])
def test_a_target_without_a_known_price_refuses_a_dry_run_and_a_budget(flag, capsys, tmp_path, monkeypatch):
    """34.6: --dry-run retried 4 times to say 'no price is known'; --budget said 'raise --budget, then --resume'."""
    monkeypatch.chdir(tmp_path)
    code = main(["train", "cartpole", *CEPHEUS, "--shots", "100", *flag])
    line = _one_line(capsys)
    assert code == 2 and f"{flag[0]} needs a price" in line and "execution time" in line, line
    assert "raise --budget" not in line


def test_rigettis_documented_price_is_in_the_table_with_its_source_and_date():
    """34.6: Rigetti's QPUs bill $0.02 per 10 ms of execution time; no documented model predicts that time, so a job
    is not priced before it runs, and its usage's cost is unknown (NaN), never 0."""
    import math

    import numpy as np

    from hqflow.backends import BackendError, CircuitBatch
    from hqflow.backends.azure.cost import list_price, load_prices
    from hqflow.ir import Circuit

    table = load_prices()
    for target in ("rigetti.qpu.cepheus-1-108q", "rigetti.qpu.ankaa-3"):
        entry = table["targets"][target]
        assert (entry["model"], entry["price_per_10ms"], entry["price_read"]) == ("time", 0.02, "2026-11-28")
    assert "0.02 per 10-millisecond increment" in table["source"] and "2026-11-28" in table["source"]
    assert "time" in table["models"]
    c = Circuit(1, name="one")
    c.rx(c.inputs("x", 1)[0], 0)
    batch = CircuitBatch.make(c.build(observables=["Z0"]), np.zeros((3, 1)), shots=100)
    with pytest.raises(BackendError, match="execution time"):
        list_price("rigetti.qpu.cepheus-1-108q", batch)
    used = get_backend("azure:rigetti.qpu.cepheus-1-108q", input_format="quil").usage(batch)
    assert used.service_jobs == 1 and math.isnan(used.cost)


def test_hqflow_backends_with_part_of_a_workspace_names_what_is_missing_and_looks_nothing_up(capsys, monkeypatch):
    """34.11: with only AZURE_QUANTUM_WORKSPACE_NAME set, the listing looked the workspace up in Azure Resource Graph
    for 18 s, tried an interactive browser credential, and ended in a 106-line traceback."""
    import os

    from azure.quantum import _mgmt_client

    def looked_up(*args, **kwargs):
        raise AssertionError("the workspace was looked up")

    monkeypatch.setattr(_mgmt_client.WorkspaceMgmtClient, "load_workspace_from_arg", looked_up)
    monkeypatch.setattr(_mgmt_client.WorkspaceMgmtClient, "load_workspace_from_arm", looked_up)
    for var in [v for v in os.environ if v.startswith("AZURE_")]:
        monkeypatch.delenv(var)
    monkeypatch.setenv("AZURE_QUANTUM_WORKSPACE_NAME", "my-ws")
    assert main(["backends"]) == 0
    out, err = capsys.readouterr()
    line = next(x for x in out.splitlines() if x.startswith("azure:"))
    assert ("set AZURE_QUANTUM_SUBSCRIPTION_ID, AZURE_QUANTUM_WORKSPACE_RG, AZURE_QUANTUM_WORKSPACE_LOCATION "
            "(or the options subscription_id, resource_group, location;") in line, line
    assert "Traceback" not in err and "looked up" not in out + err


def test_without_a_key_no_credential_opens_a_browser(monkeypatch):
    """34.11: the SDK's own default credential includes the interactive browser; hqflow's never does."""
    from azure.identity import DefaultAzureCredential, InteractiveBrowserCredential

    from hqflow.backends.azure.backend import connect

    monkeypatch.delenv("AZURE_QUANTUM_API_KEY", raising=False)
    monkeypatch.delenv("AZURE_QUANTUM_CONNECTION_STRING", raising=False)
    where = dict(subscription_id="00000000-0000-0000-0000-000000000000", resource_group="rg", name="ws",
                 location="eastus")
    credential = connect(**where, endpoint="http://127.0.0.1:9")._connection_params.credential  # nothing sent
    assert isinstance(credential, DefaultAzureCredential)
    assert not any(isinstance(c, InteractiveBrowserCredential) for c in credential.credentials)
