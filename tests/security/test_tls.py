"""TLS on the wire-protocol port: a real server with certificates from the tests' own CA;
the SDK over ``tls://`` with the right CA, a wrong CA, an expired server certificate,
verification off, and client certificates (mutual TLS)."""

from __future__ import annotations

import asyncio
import http.client
import socket
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import segmentstore_client as ss
from segmentstore_client.connection import ConnectionOptions, Endpoint, open_connection
from segmentstore_client.errors import ConnectFailed

from segmentstore.server.launcher import ServerProcess

from .certs import Pki, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _tls_server(data: Path, cert: str, key: str, *more: str) -> ServerProcess:
    s = ServerProcess(data, ["--tls-cert-file", cert, "--tls-key-file", key, *more])
    s.start()
    return s


@pytest.fixture(scope="module")
def tls_server(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = _tls_server(tmp_path_factory.mktemp("tls"), pki.server_pem, pki.server_key)
    yield s
    s.kill()


def _tls(server: ServerProcess) -> str:
    return f"tls://127.0.0.1:{server.port}"


async def test_write_and_read_over_tls(tls_server: ServerProcess, pki: Pki) -> None:
    async with ss.connect(
        _tls(tls_server), options=ConnectionOptions(tls_ca_file=pki.ca_pem)
    ) as client:
        await client.create_segment("tls/s1")
        async with client.writer("tls/s1") as w:
            await w.write_many([b"x" * 100] * 50)
        events = [e async for e in client.reader("tls/s1")]
        assert [bytes(e.data) for e in events] == [b"x" * 100] * 50


def test_endpoint_schemes() -> None:
    for scheme in ("tls", "ssl", "tcps", "pravegas"):
        assert Endpoint.parse(f"{scheme}://h:1") == Endpoint("h", 1, True)
    assert Endpoint.parse("tcp://h:1") == Endpoint("h", 1, False)
    assert str(Endpoint.parse("tls://h:1")) == "tls://h:1"


async def test_wrong_ca_fails_clearly_and_fast(tls_server: ServerProcess, pki: Pki) -> None:
    opts = ConnectionOptions(tls_ca_file=pki.other_ca_pem, connect_timeout=5)
    with pytest.raises(ConnectFailed, match="CERTIFICATE_VERIFY_FAILED") as info:
        await open_connection(Endpoint.parse(_tls(tls_server)), opts)
    assert info.value.refused  # no retry loop: the same certificate fails the same way
    # The client does not retry for reconnect_timeout either.
    client = ss.connect(_tls(tls_server), options=opts)
    with pytest.raises(ConnectFailed, match="CERTIFICATE_VERIFY_FAILED"):
        await asyncio.wait_for(client.open(), 10)
    await client.close()


async def test_plain_tcp_client_cannot_talk_to_tls_port(tls_server: ServerProcess) -> None:
    opts = ConnectionOptions(connect_timeout=3)
    with pytest.raises(ConnectFailed):
        await open_connection(Endpoint("127.0.0.1", tls_server.port), opts)


async def test_verification_off_accepts_any_certificate(
    tls_server: ServerProcess, pki: Pki
) -> None:
    opts = ConnectionOptions(tls_ca_file=pki.other_ca_pem, tls_verify=False)
    conn = await open_connection(Endpoint.parse(_tls(tls_server)), opts)
    conn.close()


async def test_expired_server_certificate_fails_clearly(pki: Pki, tmp_path: Path) -> None:
    s = _tls_server(tmp_path / "d", pki.expired_pem, pki.expired_key)
    try:
        opts = ConnectionOptions(tls_ca_file=pki.ca_pem, connect_timeout=5)
        with pytest.raises(ConnectFailed, match="certificate has expired"):
            await open_connection(Endpoint.parse(_tls(s)), opts)
    finally:
        s.kill()


async def test_client_certificates_required(pki: Pki, tmp_path: Path) -> None:
    s = _tls_server(
        tmp_path / "d", pki.server_pem, pki.server_key, "--tls-client-ca-file", pki.ca_pem
    )
    try:
        good = ConnectionOptions(
            tls_ca_file=pki.ca_pem, tls_cert_file=pki.client_pem, tls_key_file=pki.client_key
        )
        conn = await open_connection(Endpoint.parse(_tls(s)), good)
        await conn.ping()
        conn.close()
        with pytest.raises(ConnectFailed):  # no client certificate: the handshake fails
            await open_connection(
                Endpoint.parse(_tls(s)), ConnectionOptions(tls_ca_file=pki.ca_pem)
            )
    finally:
        s.kill()


def test_missing_certificate_file_is_one_line(tmp_path: Path, pki: Pki) -> None:
    s = ServerProcess(
        tmp_path / "d", ["--tls-cert-file", str(tmp_path / "nope.pem"), "--tls-key-file", "k"]
    )
    with pytest.raises(RuntimeError, match="exited with 2") as info:
        s.start()
    assert "cannot read the TLS certificate" in str(info.value)
    assert "Traceback" not in str(info.value)
    s2 = ServerProcess(tmp_path / "d2", ["--tls-cert-file", pki.server_pem])
    with pytest.raises(RuntimeError, match="needs both"):
        s2.start()


def test_metrics_port_serves_https(tls_server: ServerProcess, pki: Pki) -> None:
    url = f"https://127.0.0.1:{tls_server.http_port}/metrics"
    ctx = ssl.create_default_context(cafile=pki.ca_pem)
    with urllib.request.urlopen(url, context=ctx, timeout=10) as r:
        assert b"segmentstore" in r.read()
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(
            url, context=ssl.create_default_context(cafile=pki.other_ca_pem), timeout=10
        )
    with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
        urllib.request.urlopen(url.replace("https", "http"), timeout=10)


def test_stalled_tls_handshake_is_dropped(pki: Pki, tmp_path: Path) -> None:
    s = ServerProcess(
        tmp_path / "d",
        ["--tls-cert-file", pki.server_pem, "--tls-key-file", pki.server_key],
        env={"SEGMENTSTORE_HELLO_TIMEOUT_S": "1"},
    )
    s.start()
    try:
        with socket.create_connection(("127.0.0.1", s.port), timeout=10) as sock:
            t0 = time.monotonic()
            assert sock.recv(1) == b""  # closed by the server, not by our timeout
            assert time.monotonic() - t0 < 8
    finally:
        s.kill()
