"""The official Pravega Python client (PyPI ``pravega``) with ``auth_enabled=True`` and
``tls_enabled=True`` writes and reads against a server with TLS on both ports and auth
on: it authenticates to the controller with Basic credentials, gets its delegation token
from ``getDelegationToken`` and sends it on every wire request."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .test_secure_setup import Secure, _secure_server

DRIVER = Path(__file__).with_name("official_driver.py")


def _drive(secure: Secure, user: str, password: str, **args: Any) -> dict[str, Any]:
    env = {
        **os.environ,
        "pravega_client_auth_method": "Basic",
        "pravega_client_auth_username": user,
        "pravega_client_auth_password": password,
        "pravega_client_tls_cert_path": secure.pki.ca_pem,
    }
    args = {"uri": secure.controller.replace("127.0.0.1", "localhost"), **args}
    proc = subprocess.run(
        [sys.executable, str(DRIVER), json.dumps(args)],
        capture_output=True, text=True, timeout=150, env=env,
    )  # fmt: skip
    lines = proc.stdout.strip().splitlines()
    assert lines, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(lines[-1])
    return result


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Any:
    # The official client checks host names, not IP addresses: hand it "localhost".
    s = _secure_server(tmp_path_factory.mktemp("official"), "600", "--advertised-host", "localhost")
    yield s
    s.server.kill()


def test_official_client_with_auth_and_tls(secure: Secure) -> None:
    result = _drive(secure, "alice", "alice-pw", scope="app", stream="s1", count=50,
                    no_verify=False)  # fmt: skip
    assert result.get("read") == [f"e{i}" for i in range(50)], result
