"""What ``azure:<target>`` refuses at once, in one line, before anything is sent (issue 34): a base install
without the azure extra, options that would do nothing, and the like. None of these needs the loopback service."""
import sys

import pytest

from hqflow.backends import BackendAccessError, get_backend
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
