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
    ("azure:ionq.simulator", {"noise": {}, "location": "x"}, "unknown option 'noise'; it takes target, "),
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
