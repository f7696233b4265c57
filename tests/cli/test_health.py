"""``segmentstore health`` against a real server, a dead port and a mute peer."""

from __future__ import annotations

import json
import socket
import time
from typing import TYPE_CHECKING

import pytest

from .conftest import run_cli
from .test_segment import mute_server

if TYPE_CHECKING:
    from conftest import ServerFactory, ServerProcess  # tests/conftest.py


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_health_of_a_serving_store(module_server: ServerProcess) -> None:
    metrics = f"http://127.0.0.1:{module_server.http_port}/metrics"
    r = run_cli("health", "--metrics-url", metrics, endpoint=module_server.endpoint)
    assert r.returncode == 0, r.stdout
    out = r.stdout.decode().splitlines()
    assert [x.split()[:2] for x in out[1:4]] == [
        ["ok", "hello"],
        ["ok", "round"],
        ["ok", "metrics"],
    ]
    assert out[-1] == "healthy"
    # Without --metrics-url the check asks the endpoint's host on 9091, which is not this
    # server's: refused, or (another server on this machine having that port) a page that
    # did not count this check's scratch segment.
    r = run_cli("health", "--json", endpoint=module_server.endpoint)
    assert r.returncode == 1
    report = json.loads(r.stdout)
    assert report["healthy"] is False
    assert [(c["name"], c["ok"]) for c in report["checks"]] == [
        ("hello", True),
        ("round trip", True),
        ("metrics", False),
    ]
    assert report["checks"][2]["detail"].startswith("http://127.0.0.1:9091/metrics: ")


def test_health_refuses_another_servers_metrics(
    module_server: ServerProcess, server_factory: ServerFactory
) -> None:
    """A page that did not count the round trip's create is another store's: the check
    fails naming --metrics-url, instead of reporting that store's health as this one's."""
    other = server_factory()
    other.start()
    theirs = f"http://127.0.0.1:{other.http_port}/metrics"
    r = run_cli("health", "--json", "--metrics-url", theirs, endpoint=module_server.endpoint)
    assert r.returncode == 1, r.stdout
    check = json.loads(r.stdout)["checks"][2]
    assert check["name"] == "metrics" and not check["ok"]
    assert check["detail"] == (
        f"{theirs}: these metrics did not count this check's scratch segment, so they are "
        "another server's (--metrics-url names this one's, --no-metrics skips this check)"
    )
    r = run_cli("health", "--metrics-url", theirs, endpoint=other.endpoint)
    assert r.returncode == 0, r.stdout  # the same page is right for its own store


def test_health_fails_fast_on_a_dead_or_mute_store() -> None:
    port = _free_port()
    t0 = time.monotonic()
    r = run_cli("health", "--endpoint", f"tcp://127.0.0.1:{port}", "--json", "--timeout", "2")
    assert r.returncode == 1 and time.monotonic() - t0 < 10
    report = json.loads(r.stdout)
    assert not report["healthy"] and "could not connect" in report["checks"][0]["detail"]
    with mute_server() as ep:  # answers Hello, then never a request: the round trip fails
        t0 = time.monotonic()
        r = run_cli("health", "--endpoint", ep, "--no-metrics", "--timeout", "1")
        assert r.returncode == 1 and time.monotonic() - t0 < 10
        lines = r.stdout.decode().splitlines()
        assert lines[1].split()[:2] == ["ok", "hello"]
        assert lines[2].split()[:3] == ["FAIL", "round", "trip"]
        assert lines[-1] == "unhealthy"


def test_health_fails_when_the_metrics_count_a_stopped_container() -> None:
    """A store whose container an internal error stopped still answers Hello (and may pass
    the round trip on another container): the metrics check reads the gauge and fails."""
    import http.server
    import threading

    from segmentstore.commands.health import _get_metrics

    body = {"value": b"segmentstore_appends_total 3.0\nsegmentstore_containers_stopped 1.0\n"}

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body["value"])))
            self.end_headers()
            self.wfile.write(body["value"])

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        with pytest.raises(RuntimeError, match=r"1\.0 container\(s\) stopped after an internal"):
            _get_metrics(url, 5.0)
        body["value"] = b"segmentstore_appends_total 3.0\nsegmentstore_containers_stopped 0.0\n"
        assert _get_metrics(url, 5.0).endswith("2 segmentstore series")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
