"""The secure set-up end to end: ``segmentstore passwd`` users and static tokens, a server
with TLS on the wire and controller ports and auth on, the SDK fetching its token from the
controller's getDelegationToken (Basic or Bearer credentials) over TLS, refusals, and the
refresh of an expired token."""

from __future__ import annotations

import asyncio
import json
import re
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import jwt
import pytest
import segmentstore_client as ss
from segmentstore_client.auth import fetch_token
from segmentstore_client.connection import ConnectionOptions
from segmentstore_client.errors import AuthenticationFailed

from segmentstore.auth.acls import ACL_TABLE
from segmentstore.auth.passwords import PasswordFile
from segmentstore.server.launcher import ServerProcess

from .certs import Pki, make_pki
from .tokens import write_secret

CONTROLLER = re.compile(r"controller on (tls://[0-9.]+:\d+)")


def passwd(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "segmentstore", "passwd", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_passwd_adds_users_and_tokens(tmp_path: Path) -> None:
    pw = tmp_path / "passwd"
    done = passwd(str(pw), "alice", "--acl", "prn::/scope:app/*,READ_UPDATE", "--password-stdin",
                  stdin="s3cret\n")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert pw.stat().st_mode & 0o777 == 0o600
    assert "s3cret" not in pw.read_text()
    tok = passwd(str(pw), "svc", "--admin", "--static-token")
    assert tok.returncode == 0 and tok.stdout.startswith("sst_")
    users = PasswordFile.load(pw)
    assert users.authenticate("alice", "s3cret") is not None
    assert users.authenticate("alice", "wrong") is None
    assert users.by_token(tok.stdout.strip()) is not None
    assert users.authenticate("svc", tok.stdout.strip()) is not None  # same check, by name
    bad = passwd(str(pw), "bob", "--acl", "scope:app,READ", "--password-stdin", stdin="x\n")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "bad ACL" in bad.stderr
    bad = passwd(str(pw), "a:b", "--password-stdin", stdin="x\n")
    assert bad.returncode == 2 and "bad user name" in bad.stderr
    bad = passwd(str(pw), "nobody", "--remove")
    assert bad.returncode == 2
    assert passwd(str(pw), "alice", "--remove").returncode == 0
    assert "alice" not in PasswordFile.load(pw).users


class Secure:
    def __init__(self, server: ServerProcess, pki: Pki, token: str) -> None:
        self.server = server
        self.pki = pki
        self.static_token = token
        m = CONTROLLER.search("".join(server.log))
        assert m, server.log[-5:]
        self.controller = m.group(1)
        self.endpoint = f"tls://127.0.0.1:{server.port}"

    def connect(self, credentials: tuple[str, str] | str) -> ss.Client:
        return ss.connect(
            self.endpoint,
            credentials=credentials,
            controller=self.controller,
            tls_ca_file=self.pki.ca_pem,
        )


def _secure_server(tmp: Path, ttl: str = "600", *more: str) -> Secure:
    pki = make_pki(tmp / "pki")
    write_secret(tmp / "secret")
    pw = str(tmp / "passwd")
    alice_acl = "prn::/scope:app,READ_UPDATE;prn::/scope:app/*,READ_UPDATE"
    assert passwd(pw, "alice", "--acl", alice_acl, "--password-stdin",
                  stdin="alice-pw\n").returncode == 0  # fmt: skip
    assert passwd(pw, "reader", "--acl", "prn::/scope:app/*,READ", "--password-stdin",
                  stdin="reader-pw\n").returncode == 0  # fmt: skip
    token = passwd(pw, "svc", "--admin", "--static-token").stdout.strip()
    server = ServerProcess(
        tmp / "data",
        [
            "--tls-cert-file", pki.server_pem, "--tls-key-file", pki.server_key,
            "--auth", "on", "--auth-token-secret-file", str(tmp / "secret"),
            "--auth-password-file", pw, "--auth-token-ttl-s", ttl, "--controller-port", "0", *more,
        ],
    )  # fmt: skip
    server.start()
    return Secure(server, pki, token)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    s = _secure_server(tmp_path_factory.mktemp("secure"))
    yield s
    s.server.kill()


async def test_user_with_password_writes_and_reads(secure: Secure) -> None:
    async with secure.connect(("alice", "alice-pw")) as client:
        await client.create_segment("app/orders/0")
        async with client.writer("app/orders/0") as w:
            await w.write_many([b"e" * 100] * 20)
        assert [e.data async for e in client.reader("app/orders/0")] == [b"e" * 100] * 20
        with pytest.raises(AuthenticationFailed):  # alice has no grant outside scope app
            await client.create_segment("other/orders/0")


async def test_static_token_and_read_only_user(secure: Secure) -> None:
    async with secure.connect(secure.static_token) as admin:
        await admin.create_segment("other/x/0")  # the admin role reaches every scope
    async with secure.connect(("reader", "reader-pw")) as reader:
        with pytest.raises(AuthenticationFailed):
            await reader.create_segment("app/ro/0")


async def test_controller_refuses_bad_credentials(secure: Secure) -> None:
    opts = ConnectionOptions(tls_ca_file=secure.pki.ca_pem)
    for creds in (("alice", "wrong"), ("nobody", "x"), "sst_not-a-token", ("svc", "")):
        with pytest.raises(AuthenticationFailed):
            await fetch_token(secure.controller, creds, options=opts)
    with pytest.raises(AuthenticationFailed, match="has READ"):  # asks to write: refused
        await fetch_token(secure.controller, ("reader", "reader-pw"), scope="app",
                          stream="s", options=opts)  # fmt: skip
    token = await fetch_token(secure.controller, ("reader", "reader-pw"), scope="app",
                              stream="s", write=False, options=opts)  # fmt: skip
    assert jwt.decode(token, options={"verify_signature": False})["sub"] == "reader"


async def test_no_credentials_is_refused_by_the_store(secure: Secure) -> None:
    async with ss.connect(secure.endpoint, tls_ca_file=secure.pki.ca_pem) as client:
        with pytest.raises(AuthenticationFailed):
            await client.create_segment("app/anon/0")


async def test_expired_token_is_refreshed_once(tmp_path: Path) -> None:
    s = _secure_server(tmp_path, ttl="1")
    try:
        async with s.connect(("alice", "alice-pw")) as client:
            first = client.options.delegation_token
            exp = jwt.decode(first, options={"verify_signature": False})["exp"]
            await asyncio.sleep(max(0.0, exp - time.time()) + 0.2)
            await client.create_segment("app/late/0")  # expired -> refreshed -> done
            assert client.options.delegation_token != first
    finally:
        s.server.kill()


def _restart(s: Secure) -> Secure:
    s.server.stop()
    s.server.log.clear()
    s.server.restart()
    return Secure(s.server, s.pki, s.static_token)


async def test_acl_table_grants_at_run_time_admin_only_and_durably(tmp_path: Path) -> None:
    s = _secure_server(tmp_path)
    try:
        assert passwd(str(tmp_path / "passwd"), "bob", "--password-stdin", stdin="bob-pw\n")
        s = _restart(s)  # the password file is read at start
        async with s.connect(("bob", "bob-pw")) as bob:
            with pytest.raises(AuthenticationFailed):  # no grants yet
                await bob.create_segment("shared/x/0")
        async with s.connect(("alice", "alice-pw")) as alice:
            with pytest.raises(AuthenticationFailed):  # only the admin role writes ACLs
                await alice.table(ACL_TABLE).put("alice", "prn::*,READ_UPDATE")
        async with s.connect(s.static_token) as admin:
            await admin.table(ACL_TABLE).put("bob", "prn::/scope:shared/*,READ_UPDATE")
        s = _restart(s)  # the grant is durable
        async with s.connect(("bob", "bob-pw")) as bob:
            await bob.create_segment("shared/x/0")
    finally:
        s.server.kill()


def test_blocking_client_with_credentials(secure: Secure) -> None:
    from segmentstore_client import sync

    with sync.connect(
        secure.endpoint,
        credentials=("alice", "alice-pw"),
        controller=secure.controller,
        tls_ca_file=secure.pki.ca_pem,
    ) as client:
        client.create_segment("app/sync/0")
        assert client.segment_info("app/sync/0").length == 0


def test_controller_rpcs_are_authorized_per_resource(secure: Secure) -> None:
    import grpc
    from segmentstore_client.auth import authorization_header
    from segmentstore_client.controller_proto import controller_pb2 as pb
    from segmentstore_client.controller_proto import controller_pb2_grpc as pb_grpc

    root = Path(secure.pki.ca_pem).read_bytes()
    target = secure.controller.removeprefix("tls://")
    with grpc.secure_channel(target, grpc.ssl_channel_credentials(root)) as channel:
        stub = pb_grpc.ControllerServiceStub(channel)

        def call(method: str, request: object, creds: tuple[str, str] | str | None) -> object:
            md = () if creds is None else (("authorization", authorization_header(creds)),)
            return getattr(stub, method)(request, metadata=md, timeout=10)

        alice, reader = ("alice", "alice-pw"), ("reader", "reader-pw")
        with pytest.raises(grpc.RpcError) as info:
            call("createScope", pb.ScopeInfo(scope="app"), None)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        call("createScope", pb.ScopeInfo(scope="app"), alice)
        config = pb.StreamConfig(
            streamInfo=pb.StreamInfo(scope="app", stream="t"),
            scalingPolicy=pb.ScalingPolicy(minNumSegments=1),
        )
        call("createStream", config, alice)
        assert call("checkStreamExists", pb.StreamInfo(scope="app", stream="t"), reader)
        for method, request, creds in (
            ("createScope", pb.ScopeInfo(scope="other"), alice),  # no grant on scope other
            ("createStream", config, reader),  # READ is not enough to create
            ("sealStream", pb.StreamInfo(scope="app", stream="t"), reader),
        ):
            with pytest.raises(grpc.RpcError) as info:
                call(method, request, creds)
            assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED, method
        # Listings are filtered per caller (tests/security/test_controller_acl.py).
        assert "app" in call("listScopes", pb.ScopesRequest(), alice).scopes  # type: ignore[attr-defined]


def test_http_port_requires_credentials_when_asked(tmp_path: Path) -> None:
    import base64
    import urllib.error
    import urllib.request

    s = _secure_server(tmp_path, "600", "--http-auth", "on", "--http-port", "0")
    try:
        ctx = ssl.create_default_context(cafile=s.pki.ca_pem)
        for path in ("/metrics", "/"):
            url = f"https://127.0.0.1:{s.server.http_port}{path}"

            def get(header: str | None, url: str = url) -> int:
                req = urllib.request.Request(url)
                if header is not None:
                    req.add_header("Authorization", header)
                try:
                    with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
                        return int(r.status)
                except urllib.error.HTTPError as e:
                    return e.code

            basic = "Basic " + base64.b64encode(b"alice:alice-pw").decode()
            wrong = "Basic " + base64.b64encode(b"alice:nope").decode()
            assert get(None) == 401, path
            assert get(wrong) == 401, path
            assert get(basic) == 200, path
            assert get(f"Bearer {s.static_token}") == 200, path
        # The health check answers probes that carry no credentials (and ignores bad ones).
        url = f"https://127.0.0.1:{s.server.http_port}/healthz"
        with urllib.request.urlopen(url, context=ctx, timeout=10) as r:
            assert (r.status, json.loads(r.read())) == (200, {"status": "ok"})
        for other in ("/healthz/", "/healthz.json", "/metrics?x=/healthz"):
            req = urllib.request.Request(f"https://127.0.0.1:{s.server.http_port}{other}")
            with pytest.raises(urllib.error.HTTPError) as info:
                urllib.request.urlopen(req, context=ctx, timeout=10)
            assert info.value.code == 401, other
    finally:
        s.server.kill()
