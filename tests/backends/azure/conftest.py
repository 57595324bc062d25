"""Fixtures for Azure Quantum tests over real HTTP: Azurite (blob storage) and the loopback job
service, one of each per test session, both on 127.0.0.1.

* ``azurite``: a running ``Azurite`` (installed with ``npm ci`` from the repository's
  package.json when missing; the tests skip, saying why, without node and npm).
* ``azure_service``: a ``LoopbackService`` on it, with a random API key.
* ``azure_workspace``: the service reset (no faults, no latency, no jobs), then its
  ``workspace_options()``: subscription_id, resource_group, name, location, endpoint, key.
"""
import secrets
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def azurite():
    pytest.importorskip("azure.storage.blob", reason="needs the azure extra: pip install 'hqflow[azure]'")
    from hqflow.backends.azure.azurite import Azurite, ensure_installed

    exe = ensure_installed(str(ROOT))
    if exe is None:
        pytest.skip("Azurite is not installed and could not be: needs node and npm (then `npm ci` in the "
                    "repository), or HQFLOW_AZURITE pointing at azurite-blob")
    server = Azurite.start(exe)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def azure_service(azurite):
    pytest.importorskip("azure.quantum", reason="needs the azure extra: pip install 'hqflow[azure]'")
    from hqflow.backends.azure.loopback import LoopbackService

    svc = LoopbackService.start(storage=azurite.connection_string, key="loopback-test-key-" + secrets.token_hex(8))
    try:
        yield svc
    finally:
        svc.stop()


@pytest.fixture
def azure_workspace(azure_service):
    azure_service.configure(reset=True)
    return azure_service.workspace_options()
