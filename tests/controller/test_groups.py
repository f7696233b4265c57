"""The controller's reader-group and key-value-table RPCs (what Pravega's Java client calls;
the official Python client sends none of them), through a raw gRPC stub: statuses,
idempotent creation, generations, the internal ``_RG<group>`` stream, the table segments
behind a key-value table, scopes kept while in use, and the records across a restart."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
import segmentstore_client as sc
from segmentstore_client.controller_proto import controller_pb2 as pb
from segmentstore_client.errors import SegmentStoreError

from .conftest import Ctl, stream_info

pytestmark = pytest.mark.timeout(120)


def _rg_config(scope: str, name: str, refresh: int = 3000, **more: Any) -> Any:
    cut = pb.StreamCut(streamInfo=stream_info(scope, "s"), cut={0: 0})
    return pb.ReaderGroupConfiguration(
        scope=scope, readerGroupName=name, groupRefreshTimeMillis=refresh,
        automaticCheckpointIntervalMillis=30000, maxOutstandingCheckpointRequest=3,
        startingStreamCuts=[cut], **more,
    )  # fmt: skip


def test_reader_group_rpcs(ctl: Ctl) -> None:
    stub = ctl.stub()
    rg = pb.CreateReaderGroupResponse
    assert stub.createReaderGroup(_rg_config("nope", "g")).status == rg.SCOPE_NOT_FOUND
    stub.createScope(pb.ScopeInfo(scope="r"))
    assert stub.createReaderGroup(_rg_config("r", "bad/name")).status == rg.INVALID_RG_NAME
    made = stub.createReaderGroup(_rg_config("r", "g"))
    assert made.status == rg.SUCCESS and made.config.generation == 0
    group_id = made.config.readerGroupId
    assert len(group_id) == 36  # a UUID
    assert made.config.startingStreamCuts[0].cut == {0: 0}
    again = stub.createReaderGroup(_rg_config("r", "g", refresh=1))  # exists: idempotent
    assert again.status == rg.SUCCESS and again.config.readerGroupId == group_id
    assert again.config.groupRefreshTimeMillis == 3000  # the stored configuration
    # Pravega's internal state stream exists (one segment) and is not listed.
    assert stub.checkStreamExists(stream_info("r", "_RGg")).exists
    assert len(stub.getCurrentSegments(stream_info("r", "_RGg")).segmentRanges) == 1
    listed = stub.listStreamsInScope(pb.StreamsInScopeRequest(scope=pb.ScopeInfo(scope="r")))
    assert list(listed.streams) == []
    info = pb.ReaderGroupInfo(scope="r", readerGroup="g")
    got = stub.getReaderGroupConfig(info)
    assert got.status == pb.ReaderGroupConfigResponse.SUCCESS
    assert got.config.maxOutstandingCheckpointRequest == 3
    missing = pb.ReaderGroupInfo(scope="r", readerGroup="x")
    assert stub.getReaderGroupConfig(missing).status == pb.ReaderGroupConfigResponse.RG_NOT_FOUND
    # Updates name the generation they start from.
    up = pb.UpdateReaderGroupResponse
    reply = stub.updateReaderGroup(_rg_config("r", "g", refresh=500, generation=0))
    assert (reply.status, reply.generation) == (up.SUCCESS, 1)
    stale = stub.updateReaderGroup(_rg_config("r", "g", refresh=9, generation=0))
    assert stale.status == up.INVALID_CONFIG
    assert stub.updateReaderGroup(_rg_config("r", "x")).status == up.RG_NOT_FOUND
    assert stub.deleteScope(pb.ScopeInfo(scope="r")).status == pb.DeleteScopeStatus.SCOPE_NOT_EMPTY
    assert ctl.server.stop() == 0
    ctl.restart()
    stub = ctl.stub()
    got = stub.getReaderGroupConfig(info).config
    assert (got.generation, got.groupRefreshTimeMillis, got.readerGroupId) == (1, 500, group_id)
    dr = pb.DeleteReaderGroupStatus
    other = pb.ReaderGroupInfo(scope="r", readerGroup="g", readerGroupId="not-" + group_id)
    assert stub.deleteReaderGroup(other).status == dr.RG_NOT_FOUND  # another incarnation
    mine = pb.ReaderGroupInfo(scope="r", readerGroup="g", readerGroupId=group_id)
    assert stub.deleteReaderGroup(mine).status == dr.SUCCESS
    assert stub.deleteReaderGroup(mine).status == dr.RG_NOT_FOUND
    assert not stub.checkStreamExists(stream_info("r", "_RGg")).exists
    assert stub.deleteScope(pb.ScopeInfo(scope="r")).status == pb.DeleteScopeStatus.SUCCESS


def test_key_value_table_rpcs(ctl: Ctl) -> None:
    stub = ctl.stub()
    ck = pb.CreateKeyValueTableStatus
    kv = pb.KeyValueTableConfig
    assert stub.createKeyValueTable(kv(scope="no", kvtName="t", partitionCount=1)).status == (
        ck.SCOPE_NOT_FOUND
    )
    stub.createScope(pb.ScopeInfo(scope="k"))
    assert stub.createKeyValueTable(kv(scope="k", kvtName="a_b", partitionCount=1)).status == (
        ck.INVALID_TABLE_NAME
    )
    with pytest.raises(grpc.RpcError) as e:
        stub.createKeyValueTable(kv(scope="k", kvtName="t", partitionCount=0))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert stub.createKeyValueTable(kv(scope="k", kvtName="t", partitionCount=3)).status == (
        ck.SUCCESS
    )
    assert stub.createKeyValueTable(kv(scope="k", kvtName="t", partitionCount=3)).status == (
        ck.TABLE_EXISTS
    )
    assert stub.createKeyValueTable(kv(scope="k", kvtName="u", partitionCount=1)).status == (
        ck.SUCCESS
    )
    table = pb.KeyValueTableInfo(scope="k", kvtName="t")
    ranges = stub.getCurrentSegmentsKeyValueTable(table).segmentRanges
    assert [(r.segmentId.segmentId, r.minKey, r.maxKey) for r in ranges] == [
        (0, 0.0, 1 / 3), (1, 1 / 3, 2 / 3), (2, 2 / 3, 1.0)
    ]  # fmt: skip
    listed = stub.listKeyValueTablesInScope(
        pb.KVTablesInScopeRequest(scope=pb.ScopeInfo(scope="k"))
    )
    assert [t.kvtName for t in listed.kvtables] == ["t", "u"]
    assert listed.continuationToken.token == "u"
    assert stub.deleteScope(pb.ScopeInfo(scope="k")).status == pb.DeleteScopeStatus.SCOPE_NOT_EMPTY

    async def use_partitions() -> None:  # the partitions are table segments named as Pravega's
        async with sc.connect(ctl.server.endpoint) as client:
            for n in range(3):
                t = client.table(f"k/t_kvtable/{n}.#epoch.0")
                await t.put(b"key", b"value %d" % n)
                entry = await t.get(b"key")
                assert entry is not None and entry.value == b"value %d" % n

    asyncio.run(use_partitions())
    dk = pb.DeleteKVTableStatus
    assert stub.deleteKeyValueTable(table).status == dk.SUCCESS
    assert stub.deleteKeyValueTable(table).status == dk.TABLE_NOT_FOUND

    async def gone() -> None:
        async with sc.connect(ctl.server.endpoint) as client:
            with pytest.raises(SegmentStoreError):
                await client.table("k/t_kvtable/0.#epoch.0").info()

    asyncio.run(gone())
    with pytest.raises(grpc.RpcError) as e:
        stub.getCurrentSegmentsKeyValueTable(table)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert stub.deleteKeyValueTable(pb.KeyValueTableInfo(scope="k", kvtName="u")).status == (
        dk.SUCCESS
    )
    assert stub.deleteScope(pb.ScopeInfo(scope="k")).status == pb.DeleteScopeStatus.SUCCESS
