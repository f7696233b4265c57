"""Fixtures for the controller tests: a ``segmentstore serve`` with its gRPC controller on
an ephemeral port, the official client in a subprocess, and a raw gRPC stub."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import pytest
from segmentstore_client.controller_proto import controller_pb2 as pb
from segmentstore_client.controller_proto import controller_pb2_grpc as pb_grpc

from segmentstore.controller.metadata import Metadata
from segmentstore.controller.streams import Streams
from segmentstore.controller.transactions import Transactions
from segmentstore.storage import SegmentStore, StoreConfig
from segmentstore.tables import TableStore

if TYPE_CHECKING:
    from conftest import ServerFactory, ServerProcess  # tests/conftest.py

CONTROLLER = re.compile(r"controller on (tcp://[0-9.]+:\d+)")
DRIVER = Path(__file__).with_name("driver.py")


def controller_uri(server: ServerProcess) -> str:
    for line in server.log:
        m = CONTROLLER.search(line)
        if m:
            return m.group(1)
    raise AssertionError("no controller on the ready line:\n" + "".join(server.log[-20:]))


@dataclass
class Ctl:
    """A running server with its controller, restartable on the same ports."""

    server: ServerProcess

    @property
    def uri(self) -> str:
        return controller_uri(self.server)

    def stub(self) -> Any:
        channel = grpc.insecure_channel(self.uri.removeprefix("tcp://"))
        return pb_grpc.ControllerServiceStub(channel)

    def restart(self) -> None:
        port = int(self.uri.rsplit(":", 1)[1])
        self.server.log.clear()
        self.server.extra_args[self.server.extra_args.index("--controller-port") + 1] = str(port)
        self.server.start()


@pytest.fixture
def ctl_factory(server_factory: ServerFactory) -> Iterator[Any]:
    def make(env: dict[str, str] | None = None, extra: list[str] | None = None) -> Ctl:
        s = server_factory(extra_args=["--controller-port", "0", *(extra or [])], env=env)
        s.start()
        return Ctl(s)

    yield make


@pytest.fixture
def ctl(ctl_factory: Any) -> Ctl:
    c: Ctl = ctl_factory()
    return c


def run_driver(command: str, timeout: float = 120, **args: Any) -> dict[str, Any]:
    """Run one driver command in a fresh process; its JSON result."""
    proc = subprocess.run(
        [sys.executable, str(DRIVER), command, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"driver {command} failed ({proc.returncode}):\n{proc.stdout[-500:]}\n{proc.stderr[-3000:]}"
        )
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def start_driver(command: str, **args: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(DRIVER), command, json.dumps(args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_ready(proc: subprocess.Popen[str]) -> None:
    """Wait for a reader driver's READY line (its reader group exists)."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "READY", line


def finish_driver(proc: subprocess.Popen[str], timeout: float = 120) -> dict[str, Any]:
    out, err = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"driver failed ({proc.returncode}):\n{out[-500:]}\n{err[-3000:]}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def check_events(lines: list[str], keys: int, per_key: int | None = None) -> dict[str, list[int]]:
    """Every ``key:n`` event once and in order per key; returns the numbers per key."""
    seen: dict[str, list[int]] = {}
    for line in lines:
        key, _, n = line.strip().rpartition(":")
        seen.setdefault(key, []).append(int(n))
    for key, ns in seen.items():
        assert ns == sorted(ns), f"key {key}: out of order"
        assert len(ns) == len(set(ns)), f"key {key}: duplicates"
        if per_key is not None:
            assert ns == list(range(per_key)), f"key {key}: {len(ns)} events, gaps or extras"
    assert len(seen) <= keys
    return seen


async def open_in_process(path: Path) -> tuple[SegmentStore, TableStore, Streams, Transactions]:
    """The controller's parts on a real store in this process, after startup recovery
    (close with ``tables.close()`` then ``store.close()``)."""
    store = await SegmentStore.open(StoreConfig(data_dir=path, direct_io=False))
    tables = await TableStore.open(store)
    md = await Metadata.open(tables)
    streams = Streams(store, md)
    txns = Transactions(streams, md)
    await streams.recover()
    await txns.recover()
    return store, tables, streams, txns


def stream_info(scope: str, stream: str) -> Any:
    return pb.StreamInfo(scope=scope, stream=stream)


def create_stream(stub: Any, scope: str, stream: str, segments: int, **policy: Any) -> None:
    stub.createScope(pb.ScopeInfo(scope=scope))
    cfg = pb.StreamConfig(
        streamInfo=stream_info(scope, stream),
        scalingPolicy=pb.ScalingPolicy(minNumSegments=segments, **policy),
    )
    assert stub.createStream(cfg).status == pb.CreateStreamStatus.SUCCESS
