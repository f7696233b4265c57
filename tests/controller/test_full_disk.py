"""The controller of a real ``segmentstore serve`` whose data directory fills up (issue 16,
trust): every mutating call answers gRPC UNAVAILABLE naming the storage, logs one line and
no traceback, makes nothing half; once space is freed the same calls work, and a restart
after SIGTERM and after kill -9 comes up with the same, consistent metadata. Needs a small
filesystem (a tmpfs mounted for the test; skipped where mounting is not allowed)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import pytest
import segmentstore_client as sc
from segmentstore_client.controller_proto import controller_pb2 as pb
from server.test_disk_full import fill, small_disk  # noqa: F401 (a fixture)

from .conftest import Ctl, create_stream, stream_info

if TYPE_CHECKING:
    from conftest import ServerFactory

KiB = 1024


def top_up(filler: Path) -> None:
    """Give the filler whatever space came free (the store moves log data into chunk
    files and recycles log files in the background)."""
    with open(filler, "ab", buffering=0) as f:
        for block in (64 * KiB, 4 * KiB, 256):
            for _ in range(4096):  # bounded: the disk is small
                try:
                    f.write(b"\0" * block)
                except OSError:
                    break


async def exhaust_log(endpoint: str, segment: str, filler: Path) -> None:
    """Append to ``segment`` until the store refuses even a 32-byte append at once: the
    log's ready-made files are used up and the filler took the rest of the disk."""
    async with sc.connect(endpoint, reconnect_timeout=5.0, request_timeout=10.0) as client:
        await client.create_segment(segment)
        for _ in range(20):  # rounds, until the disk stays full
            top_up(filler)
            for size in (128 * KiB, 8 * KiB, 512, 32):  # ever smaller, to the last bytes
                w = client.writer(segment)  # a writer stops at its first failed append
                written = 0
                for _ in range(200):  # far more than the log files hold at 128 KiB
                    try:
                        await asyncio.wait_for(await w.write(b"x" * size), 20)
                    except (sc.SegmentStoreError, OSError):
                        break
                    written += 1
                w.abort()
            if written == 0:
                return
        raise AssertionError("the disk never stayed full")


def unavailable(call: Any, *args: Any) -> str:
    with pytest.raises(grpc.RpcError) as err:
        call(*args, timeout=20)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE, err.value
    details: str = err.value.details()
    assert "storage unavailable" in details
    return details


def check_metadata(stub: Any) -> None:
    """What the test made, as it must be after the disk filled, was freed and restarted."""
    scopes = stub.listScopes(pb.ScopesRequest(), timeout=20).scopes
    assert sorted(scopes) == ["d", "e"]
    listed = stub.listStreamsInScope(pb.StreamsInScopeRequest(scope=pb.ScopeInfo(scope="d")))
    assert sorted(s.stream for s in listed.streams) == ["s", "t"]
    current = stub.getCurrentSegments(stream_info("d", "s")).segmentRanges
    assert len(current) == 3  # the scale finished
    t = stub.getCurrentSegments(stream_info("d", "t")).segmentRanges
    assert len(t) == 2
    assert stub.checkStreamExists(stream_info("d", "old")).exists is False


def test_controller_on_a_full_disk(server_factory: ServerFactory, small_disk: Path) -> None:  # noqa: F811
    server = server_factory(
        data_dir=small_disk / "data",
        extra_args=["--controller-port", "0", "--log-file-mb", "1"],
    )
    server.start()
    ctl = Ctl(server)
    stub = ctl.stub()
    create_stream(stub, "d", "s", 2)
    create_stream(stub, "d", "old", 1)
    assert stub.sealStream(stream_info("d", "old")).status == pb.UpdateStreamStatus.SUCCESS
    txn = stub.createTransaction(
        pb.CreateTxnRequest(streamInfo=stream_info("d", "s"), lease=60_000)
    )
    fill(small_disk / "filler")
    asyncio.run(exhaust_log(server.endpoint, "junk", small_disk / "filler"))

    info = stream_info("d", "s")
    halves = [pb.ScaleRequest.KeyRangeEntry(start=a, end=b) for a, b in ((0, 0.25), (0.25, 0.5))]
    scale = pb.ScaleRequest(streamInfo=info, sealedSegments=[0], newKeyRanges=halves)
    cfg_t = pb.StreamConfig(
        streamInfo=stream_info("d", "t"), scalingPolicy=pb.ScalingPolicy(minNumSegments=2)
    )
    txn_req = pb.TxnRequest(streamInfo=info, txnId=txn.txnId)
    calls = [
        (stub.createScope, pb.ScopeInfo(scope="e")),
        (stub.createStream, cfg_t),
        (stub.scale, scale),
        (stub.deleteStream, stream_info("d", "old")),
        (stub.createTransaction, pb.CreateTxnRequest(streamInfo=info, lease=60_000)),
        (stub.commitTransaction, txn_req),
    ]
    for call, request in calls:
        top_up(small_disk / "filler")  # what the store's background work freed meanwhile
        unavailable(call, request)
    state = stub.checkTransactionState(txn_req).state
    assert state == pb.TxnState.OPEN  # not COMMITTING: nothing of the commit was recorded
    assert list(stub.listScopes(pb.ScopesRequest()).scopes) == ["d"]
    assert stub.checkStreamExists(stream_info("d", "t")).exists is False
    assert len(stub.getCurrentSegments(info).segmentRanges) == 2

    os.unlink(small_disk / "filler")  # space is back: the same calls work
    assert stub.createScope(pb.ScopeInfo(scope="e")).status == pb.CreateScopeStatus.SUCCESS
    assert stub.createStream(cfg_t).status == pb.CreateStreamStatus.SUCCESS
    assert stub.scale(scale).status == pb.ScaleResponse.ScaleStreamStatus.STARTED
    assert stub.deleteStream(stream_info("d", "old")).status == pb.DeleteStreamStatus.SUCCESS
    assert stub.commitTransaction(txn_req).status == pb.TxnStatus.SUCCESS
    check_metadata(stub)
    log = "".join(server.log)
    assert "Traceback" not in log, log[-3000:]
    assert "storage unavailable" in log

    assert server.stop() == 0  # SIGTERM
    ctl.restart()
    check_metadata(ctl.stub())
    server.kill()  # kill -9
    ctl.restart()
    check_metadata(ctl.stub())
    assert "Traceback" not in "".join(server.log)
