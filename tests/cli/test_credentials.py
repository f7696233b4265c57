"""Credentials and TLS on the command line: ``--user`` (password from
$SEGMENTSTORE_PASSWORD), ``--token``, ``--tls-ca-file`` and ``--controller`` against a real
server with TLS and auth on (users made by ``segmentstore passwd``)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from security.certs import make_pki  # tests/security/certs.py
from security.tokens import write_secret  # tests/security/tokens.py

from segmentstore.server.launcher import ServerProcess

from .conftest import run_cli

CONTROLLER = re.compile(r"controller on (tls://[0-9.]+:\d+)")


@dataclass
class Secure:
    server: ServerProcess
    ca: str
    token: str

    def common(self) -> list[str]:
        m = CONTROLLER.search("".join(self.server.log))
        assert m, self.server.log[-5:]
        return [
            "--endpoint", f"tls://127.0.0.1:{self.server.port}",
            "--controller", m.group(1),
            "--tls-ca-file", self.ca,
        ]  # fmt: skip


def _passwd(*args: str, stdin: str = "") -> str:
    done = subprocess.run(
        [sys.executable, "-m", "segmentstore", "passwd", *args],
        input=stdin, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    tmp = tmp_path_factory.mktemp("cli-secure")
    pki = make_pki(tmp / "pki")
    write_secret(tmp / "secret")
    pw = str(tmp / "passwd")
    _passwd(pw, "alice", "--acl", "prn::/scope:app,READ_UPDATE;prn::/scope:app/*,READ_UPDATE",
            "--password-stdin", stdin="alice-pw\n")  # fmt: skip
    token = _passwd(pw, "svc", "--admin", "--static-token")
    server = ServerProcess(
        tmp / "data",
        [
            "--tls-cert-file", pki.server_pem, "--tls-key-file", pki.server_key,
            "--auth", "on", "--auth-token-secret-file", str(tmp / "secret"),
            "--auth-password-file", pw, "--controller-port", "0",
        ],
    )  # fmt: skip
    server.start()
    yield Secure(server, pki.ca_pem, token)
    server.kill()


def test_user_token_and_refusals(secure: Secure, monkeypatch: pytest.MonkeyPatch) -> None:
    common = secure.common()
    monkeypatch.setenv("SEGMENTSTORE_PASSWORD", "alice-pw")
    r = run_cli("segment", "create", "app/cli/0", "--user", "alice", *common)
    assert r.returncode == 0, r.stderr
    # options before the subcommand, and events after an option
    r = run_cli(*common, "--user", "alice", "segment", "write", "app/cli/0", "-q", "a", "b")
    assert r.returncode == 0, r.stderr
    r = run_cli("segment", "cat", "app/cli/0", "--token", secure.token, *common)
    assert r.returncode == 0 and r.stdout == b"a\nb\n", r.stderr
    # alice may not write outside scope app; no credentials at all; a wrong password
    for argv, env_pw in (
        (("segment", "create", "other/x/0", "--user", "alice"), "alice-pw"),
        (("segment", "create", "app/anon/0"), "alice-pw"),
        (("segment", "create", "app/x/0", "--user", "alice"), "wrong"),
    ):
        monkeypatch.setenv("SEGMENTSTORE_PASSWORD", env_pw)
        r = run_cli(*argv, *common)
        assert r.returncode == 15, (argv, r.stderr)
        assert r.stderr.count(b"\n") == 1
    monkeypatch.delenv("SEGMENTSTORE_PASSWORD")
    r = run_cli("segment", "info", "app/cli/0", "--user", "alice", *common)  # stdin: no tty
    assert r.returncode == 2 and b"needs $SEGMENTSTORE_PASSWORD" in r.stderr
    r = run_cli("segment", "info", "app/cli/0", "--user", "a", "--token", "t", *common)
    assert r.returncode == 2 and b"not both" in r.stderr
    # the server's certificate is not trusted without the CA
    r = run_cli("segment", "info", "app/cli/0", "--token", secure.token, *common[:4])
    assert r.returncode == 3 and r.stderr.count(b"\n") == 1


def test_token_from_the_environment(secure: Secure, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SEGMENTSTORE_TOKEN", secure.token)
    monkeypatch.setenv("SEGMENTSTORE_TLS_CA_FILE", secure.ca)
    r = run_cli("segment", "create", "other/env/0", "--exist-ok", *secure.common()[:4])
    assert r.returncode == 0, r.stderr
    assert Path(secure.ca).exists()
