"""Transactions: the official client's commit and abort, lease expiry, commits of
transactions opened before a scale, and a crash between the merges of one commit."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from segmentstore_client.controller_proto import controller_pb2 as pb

from segmentstore.controller.metadata import Metadata
from segmentstore.controller.model import TXN_COMMITTING
from segmentstore.controller.streams import Streams
from segmentstore.controller.transactions import Transactions
from segmentstore.storage import SegmentStore, StoreConfig
from segmentstore.tables import TableStore

from .conftest import Ctl, check_events, create_stream, run_driver, start_driver, stream_info
from .test_scale import _scale, segment_info

pytestmark = pytest.mark.timeout(240)


def _read_all(ctl: Ctl, tmp_path: Path, scope: str, stream: str, count: int) -> list[str]:
    out = tmp_path / f"{stream}-{time.monotonic_ns()}.txt"
    r = run_driver(
        "read", uri=ctl.uri, scope=scope, stream=stream, group=f"g{time.monotonic_ns()}",
        count=count, out_file=str(out), seconds=8,
    )  # fmt: skip
    assert r["read"] == count
    return out.read_text().splitlines()


def test_commit_and_abort_with_the_official_client(ctl: Ctl, tmp_path: Path) -> None:
    run_driver("admin", uri=ctl.uri, steps=[["create_scope", "t"], ["create_stream", "t", "s", 3]])
    out = run_driver(
        "txn", uri=ctl.uri, scope="t", stream="s", per_txn=200,
        actions=["commit", "abort", "commit", "abort"],
    )  # fmt: skip
    states = [(t["open_before"], t["open_after"]) for t in out["txns"]]
    assert states == [(True, False)] * 4
    lines = _read_all(ctl, tmp_path, "t", "s", 400)
    assert {line.split(":")[0] for line in lines} == {"t0", "t2"}  # aborted ones never appear
    for t in ("t0", "t2"):
        check_events([line[3:] for line in lines if line.startswith(t)], keys=4)
    # No transaction segment is left behind.
    stub = ctl.stub()
    for txn in out["txns"]:
        tid = txn["id"]
        high, low = tid >> 64, tid & ((1 << 64) - 1)
        req = pb.TxnRequest(
            streamInfo=stream_info("t", "s"), txnId=pb.TxnId(highBits=_s64(high), lowBits=_s64(low))
        )
        state = stub.checkTransactionState(req).state
        assert state in (pb.TxnState.COMMITTED, pb.TxnState.ABORTED)


def _s64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _create_txn(stub: Any, scope: str, stream: str, lease: int) -> Any:
    return stub.createTransaction(
        pb.CreateTxnRequest(streamInfo=stream_info(scope, stream), lease=lease)
    )


@pytest.mark.serial  # timing bounds: scripts/test runs it alone
def test_lease_expiry_aborts_and_ping_keeps_alive(ctl: Ctl) -> None:
    stub = ctl.stub()
    create_stream(stub, "l", "s", 2)
    info = stream_info("l", "s")
    dying = _create_txn(stub, "l", "s", 400)
    alive = _create_txn(stub, "l", "s", 400)
    assert dying.txnId.lowBits >= 0 and dying.txnId.highBits >> 32 == 0  # epoch 0
    assert [r.segmentId.segmentId for r in dying.activeSegments] == [0, 1]
    deadline = time.monotonic() + 10
    state = pb.TxnState.OPEN
    while time.monotonic() < deadline and state == pb.TxnState.OPEN:
        ping = stub.pingTransaction(
            pb.PingTxnRequest(streamInfo=info, txnId=alive.txnId, lease=400)
        )
        assert ping.status == pb.PingTxnStatus.OK
        state = stub.checkTransactionState(pb.TxnRequest(streamInfo=info, txnId=dying.txnId)).state
        time.sleep(0.2)
    assert state == pb.TxnState.ABORTED
    assert (
        stub.checkTransactionState(pb.TxnRequest(streamInfo=info, txnId=alive.txnId)).state
        == pb.TxnState.OPEN
    )
    ping = stub.pingTransaction(pb.PingTxnRequest(streamInfo=info, txnId=dying.txnId, lease=400))
    assert ping.status == pb.PingTxnStatus.ABORTED
    assert (
        stub.commitTransaction(pb.TxnRequest(streamInfo=info, txnId=dying.txnId)).status
        == pb.TxnStatus.FAILURE
    )
    # Bad requests: a lease too long, an unknown transaction or stream.
    with pytest.raises(grpc.RpcError) as e:
        _create_txn(stub, "l", "s", 10**9)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    ghost = pb.TxnId(highBits=0, lowBits=12345)
    assert (
        stub.commitTransaction(pb.TxnRequest(streamInfo=info, txnId=ghost)).status
        == pb.TxnStatus.TRANSACTION_NOT_FOUND
    )
    assert (
        stub.abortTransaction(pb.TxnRequest(streamInfo=stream_info("l", "x"), txnId=ghost)).status
        == pb.TxnStatus.STREAM_NOT_FOUND
    )
    with pytest.raises(grpc.RpcError) as e:
        stub.checkTransactionState(pb.TxnRequest(streamInfo=info, txnId=ghost))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


def test_transaction_opened_before_a_scale_commits_into_the_successors(
    ctl: Ctl, tmp_path: Path
) -> None:
    stub = ctl.stub()
    run_driver("admin", uri=ctl.uri, steps=[["create_scope", "r"], ["create_stream", "r", "s", 2]])
    run_driver("write", uri=ctl.uri, scope="r", stream="s", count=100, keys=4)
    txn = start_driver(
        "txn", uri=ctl.uri, scope="r", stream="s", per_txn=100, actions=["commit"], pause=True
    )
    assert txn.stdout is not None and txn.stdin is not None
    assert txn.stdout.readline().strip() == "PAUSED"  # written, not yet committed
    assert (
        _scale(stub, "r", "s", [0, 1], [(0.0, 1.0 / 3), (1.0 / 3, 2.0 / 3), (2.0 / 3, 1.0)]).status
        == pb.ScaleResponse.STARTED
    )  # type: ignore[attr-defined]
    txn.stdin.write("\n")
    txn.stdin.flush()
    _out, err = txn.communicate(timeout=60)
    assert txn.returncode == 0, err
    run_driver("write", uri=ctl.uri, scope="r", stream="s", count=100, keys=4, start=100)
    lines = _read_all(ctl, tmp_path, "r", "s", 300)
    plain = [line for line in lines if not line.startswith("t0:")]
    check_events(plain, keys=4, per_key=50)
    check_events([line[3:] for line in lines if line.startswith("t0:")], keys=4)
    assert sum(line.startswith("t0:") for line in lines) == 100
    # The rolled commit: copies of epoch 0 took the transaction, then the ranges of epoch 1
    # came back; the current segments again have epoch 1's key ranges.
    ranges = [
        (round(r.minKey, 6), round(r.maxKey, 6))
        for r in stub.getCurrentSegments(stream_info("r", "s")).segmentRanges
    ]
    assert ranges == [
        (0.0, round(1 / 3, 6)),
        (round(1 / 3, 6), round(2 / 3, 6)),
        (round(2 / 3, 6), 1.0),
    ]
    assert segment_info(ctl, "r/s/5.#epoch.2").length > 0  # a copy holds the transaction


async def test_crash_between_the_merges_of_a_commit_finishes_exactly_once(tmp_path: Path) -> None:
    """The commit stops (as if the process died) after its first merge; reopening the
    store finishes it, and every transaction event is in the stream exactly once."""
    store = await SegmentStore.open(StoreConfig(data_dir=tmp_path, direct_io=False))
    tables = await TableStore.open(store)
    md = await Metadata.open(tables)
    streams = Streams(store, md)
    txns = Transactions(streams, md)
    await streams.create_scope("c")
    from segmentstore.controller.model import StreamConfig

    assert await streams.create_stream("c", "s", StreamConfig(min_segments=3)) == "SUCCESS"
    txn, rec = await txns.create("c", "s", 60_000)
    for i, sid in enumerate(txn.segments):
        await store.append(rec.seg_name(sid) + txn.suffix, f"event-{i}".encode())
    real_merge = store.merge
    calls = 0

    async def merge_then_die(target: str, source: str) -> int:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise SystemExit("simulated crash")
        return await real_merge(target, source)

    store.merge = merge_then_die  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        await txns.commit(txn)
    assert md.txns[txn.key].state == TXN_COMMITTING
    store.merge = real_merge  # type: ignore[method-assign]
    await tables.close()
    await store.close()

    store = await SegmentStore.open(StoreConfig(data_dir=tmp_path, direct_io=False))
    tables = await TableStore.open(store)
    md = await Metadata.open(tables)
    assert md.txns[txn.key].state == TXN_COMMITTING
    streams = Streams(store, md)
    txns = Transactions(streams, md)
    await streams.recover()
    await txns.recover()
    assert md.txns[txn.key].state == pb.TxnState.COMMITTED
    for i, sid in enumerate(txn.segments):
        data = (await store.read(rec.seg_name(sid), 0, 1000)).data
        assert bytes(data) == f"event-{i}".encode()  # once, not twice, not lost
        assert not store.exists(rec.seg_name(sid) + txn.suffix)
    await tables.close()
    await store.close()


def test_sealing_a_stream_aborts_its_open_transactions(ctl: Ctl) -> None:
    stub = ctl.stub()
    create_stream(stub, "q", "s", 2)
    info = stream_info("q", "s")
    txn = _create_txn(stub, "q", "s", 60_000)
    assert stub.sealStream(info).status == pb.UpdateStreamStatus.SUCCESS
    assert (
        stub.checkTransactionState(pb.TxnRequest(streamInfo=info, txnId=txn.txnId)).state
        == pb.TxnState.ABORTED
    )
    assert (
        stub.commitTransaction(pb.TxnRequest(streamInfo=info, txnId=txn.txnId)).status
        == pb.TxnStatus.FAILURE
    )
    with pytest.raises(grpc.RpcError) as e:
        _create_txn(stub, "q", "s", 60_000)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert stub.deleteStream(info).status == pb.DeleteStreamStatus.SUCCESS
    assert (
        stub.commitTransaction(pb.TxnRequest(streamInfo=info, txnId=txn.txnId)).status
        == pb.TxnStatus.STREAM_NOT_FOUND
    )


class _Context:
    async def abort(self, code: Any, details: str) -> None:
        raise AssertionError(f"{code}: {details}")


@pytest.mark.parametrize("crash_before", ["seal_stream", "abort_open"])
async def test_a_crash_during_a_seal_leaves_no_aborted_transaction_on_an_open_stream(
    tmp_path: Path, crash_before: str
) -> None:
    """sealStream seals the stream and aborts its open transactions. A kill -9 between the
    two (the directory copied just before either step) leaves, after startup, the stream
    sealed with the transaction aborted or the stream open with it open; never an aborted
    transaction on a stream that still takes writes (the seal was not answered, and a
    retry would find nothing to say why the transaction died)."""
    from segmentstore.controller.model import TXN_ABORTED, TXN_OPEN, StreamConfig
    from segmentstore.controller.service import Service

    from .conftest import open_in_process

    live = tmp_path / "live"
    store, tables, streams, txns = await open_in_process(live)
    await streams.create_scope("c")
    assert await streams.create_stream("c", "s", StreamConfig(min_segments=2)) == "SUCCESS"
    txn, _ = await txns.create("c", "s", 60_000)
    service = Service(streams, txns, ("127.0.0.1", 1), ("127.0.0.1", 2))
    target = streams if crash_before == "seal_stream" else txns
    real = getattr(target, crash_before)

    async def copy_then_run(scope: str, stream: str) -> Any:
        if not (tmp_path / "crash").exists():  # the first call: what a kill -9 here leaves
            shutil.copytree(live, tmp_path / "crash")
        return await real(scope, stream)

    setattr(target, crash_before, copy_then_run)
    reply = await service.sealStream(stream_info("c", "s"), _Context())
    assert reply.status == pb.UpdateStreamStatus.SUCCESS
    await tables.close()
    await store.close()

    store, tables, streams, txns = await open_in_process(tmp_path / "crash")
    sealed = streams.get("c", "s").state == "sealed"  # type: ignore[union-attr]
    state = txns.find("c", "s", txn.high, txn.low).state
    assert (sealed, state) in ((True, TXN_ABORTED), (False, TXN_OPEN))
    await tables.close()
    await store.close()


async def test_committing_an_open_transaction_of_a_sealed_stream_aborts_it(tmp_path: Path) -> None:
    """Between a stream's seal and the abort of its open transactions (or after a crash
    there) a commit finds an open transaction on a sealed stream: it is aborted (FAILURE),
    not merged into a sealed segment and left COMMITTING."""
    from segmentstore.controller.model import TXN_ABORTED, StreamConfig

    from .conftest import open_in_process

    store, tables, streams, txns = await open_in_process(tmp_path)
    await streams.create_scope("c")
    assert await streams.create_stream("c", "s", StreamConfig(min_segments=2)) == "SUCCESS"
    txn, rec = await txns.create("c", "s", 60_000)
    await store.append(rec.seg_name(txn.segments[0]) + txn.suffix, b"event")
    assert await streams.seal_stream("c", "s") == "SUCCESS"
    assert await txns.commit(txn) == "FAILURE"
    assert txn.state == TXN_ABORTED
    assert not store.exists(rec.seg_name(txn.segments[0]) + txn.suffix)
    assert store.info(rec.seg_name(txn.segments[0])).length == 0
    await tables.close()
    await store.close()
