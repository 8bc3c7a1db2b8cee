"""The unit tier (`make test-fast`) starts no kernel and runs no command: a test that tries fails
here, and belongs in tests/integration."""

from __future__ import annotations

import subprocess

import pytest
from jupyter_client.provisioning.local_provisioner import LocalProvisioner


@pytest.fixture(autouse=True)
def _no_kernel_and_no_command(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a unit test started a kernel or a command: move it to integration")

    async def refuse_kernel(*args, **kwargs):
        refuse()

    monkeypatch.setattr(LocalProvisioner, "launch_kernel", refuse_kernel)
    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
