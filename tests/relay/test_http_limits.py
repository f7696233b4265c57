"""The HTTP port (``/metrics`` and the relay) is served by the event loop with the wire
port's limits: idle connections cost no thread, the connection cap refuses the excess,
and the idle timeout closes connections that send nothing."""

from __future__ import annotations

import socket
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conftest import ServerFactory


def _threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads line")


def _get_metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        assert r.status == 200
        return bytes(r.read()).decode()


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def _closed_by_peer(sock: socket.socket, wait: float) -> bool:
    sock.settimeout(wait)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_500_idle_connections_cost_no_threads(server_factory: ServerFactory) -> None:
    srv = server_factory()
    srv.start()
    assert srv.proc is not None
    assert "segmentstore_appends_total" in _get_metrics(srv.http_port)
    before = _threads(srv.proc.pid)
    idle = [_connect(srv.http_port) for _ in range(500)]
    try:
        time.sleep(0.5)
        started = time.monotonic()
        text = _get_metrics(srv.http_port)
        assert time.monotonic() - started < 5
        assert "segmentstore_open_connections" in text
        # A thread per connection would add 500; allow the store's few worker threads.
        assert _threads(srv.proc.pid) <= before + 4
        assert all(not _closed_by_peer(s, 0.001) for s in idle[:20])
    finally:
        for s in idle:
            s.close()


def test_cap_refuses_excess_and_idle_timeout_closes(server_factory: ServerFactory) -> None:
    srv = server_factory(
        env={"SEGMENTSTORE_HTTP_MAX_CONNECTIONS": "10", "SEGMENTSTORE_HTTP_IDLE_TIMEOUT_S": "2"}
    )
    srv.start()
    held = [_connect(srv.http_port) for _ in range(10)]
    try:
        time.sleep(0.2)
        extra = _connect(srv.http_port)
        assert _closed_by_peer(extra, 0.8), "the 11th connection was not refused"
        extra.close()
        # Each held connection sent nothing: the idle timer closes all of them.
        assert all(_closed_by_peer(s, 5) for s in held)
        # With the idle ones gone, /metrics answers again.
        assert "segmentstore_reads_total" in _get_metrics(srv.http_port)
    finally:
        for s in held:
            s.close()


def test_request_half_sent_is_closed_and_keepalive_is_timed(server_factory: ServerFactory) -> None:
    srv = server_factory(env={"SEGMENTSTORE_HTTP_IDLE_TIMEOUT_S": "1"})
    srv.start()
    half = _connect(srv.http_port)
    half.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # no blank line: never finished
    keep = _connect(srv.http_port)
    keep.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    keep.settimeout(5)
    got = b""
    while b"segmentstore_events_total" not in got:
        chunk = keep.recv(65536)
        assert chunk, "closed before the reply"
        got += chunk
    assert got.startswith(b"HTTP/1.1 200")
    started = time.monotonic()
    assert _closed_by_peer(half, 5)
    assert _closed_by_peer(keep, 5)
    assert time.monotonic() - started < 4
    half.close()
    keep.close()
