"""The gRPC face of the controller: Pravega's ControllerService on ``grpc.aio``.

Contract: each method converts protobuf messages to the model's types, calls ``Streams``
or ``Transactions``, and answers with the status enum value the official clients expect.
A malformed request (``BadRequest``) is answered with gRPC INVALID_ARGUMENT, an unknown
stream where the reply has no status field with NOT_FOUND, a store that cannot write
(disk full, I/O error: ``StorageUnavailable``) with UNAVAILABLE and one log line; the clients fail at once on
both (they retry only UNAVAILABLE-like codes and FAILURE statuses). Every call is counted
by method and outcome in ``rpc_counts``. Nothing here blocks the event loop.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import grpc
from segmentstore_client.controller_proto import controller_pb2
from segmentstore_client.controller_proto import controller_pb2_grpc as pb_grpc

from ..auth.controller_auth import caller_visibility
from ..server.metrics import Histogram
from ..storage import StorageUnavailable
from .groups import Groups
from .model import (
    TXN_OPEN,
    StreamConfig,
    StreamRecord,
    TxnRecord,
    even_ranges,
    to_signed64,
)
from .streams import BadRequest, Streams, now_ms
from .transactions import TooManyTxns, Transactions, TxnNotFound

pb: Any = controller_pb2  # generated, untyped (see pyproject's mypy overrides)

log = logging.getLogger("segmentstore.controller")

_R = TypeVar("_R")
RPC_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0, 5.0)
Ctx = Any  # grpc.aio.ServicerContext (grpc ships no type hints)


def _counted(
    fn: Callable[[Service, Any, Ctx], Awaitable[_R]],
) -> Callable[[Service, Any, Ctx], Awaitable[_R]]:
    name = fn.__name__

    async def wrapper(self: Service, request: Any, context: Ctx) -> _R:
        t0 = time.perf_counter()
        try:
            reply = await fn(self, request, context)
        except BadRequest as e:
            self.rpc_counts[(name, "INVALID_ARGUMENT")] += 1
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            raise  # not reached: abort raises
        except TxnNotFound as e:
            self.rpc_counts[(name, "NOT_FOUND")] += 1
            await context.abort(grpc.StatusCode.NOT_FOUND, f"not found: {e}")
            raise
        except TooManyTxns as e:
            self.rpc_counts[(name, "RESOURCE_EXHAUSTED")] += 1
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(e))
            raise
        except StorageUnavailable as e:
            # Disk full or an I/O error: nothing of the failed step was applied, what was
            # durable before it is finished by the background task (or a retry): one line.
            log.warning("controller: %s failed, storage unavailable: %s", name, e)
            self.rpc_counts[(name, "UNAVAILABLE")] += 1
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"storage unavailable: {e}")
            raise
        except Exception as e:
            if isinstance(e, grpc.aio.AbortError):
                raise
            log.exception("controller: %s failed", name)
            self.rpc_counts[(name, "INTERNAL")] += 1
            await context.abort(grpc.StatusCode.INTERNAL, f"{type(e).__name__}: {e}")
            raise
        finally:
            self._timed(name, time.perf_counter() - t0)
        label = _status_label(reply)
        self.rpc_counts[(name, label)] += 1
        return reply

    wrapper.__name__ = name
    return wrapper


def _status_label(reply: Any) -> str:
    field = reply.DESCRIPTOR.fields_by_name.get("status")
    if field is None or field.enum_type is None:
        return "OK"
    return str(field.enum_type.values_by_number[reply.status].name)


def _config(msg: Any) -> StreamConfig:
    sp, rp = msg.scalingPolicy, msg.retentionPolicy
    return StreamConfig(
        scale_type=sp.scaleType,
        target_rate=sp.targetRate,
        scale_factor=sp.scaleFactor,
        min_segments=sp.minNumSegments,
        retention_type=rp.retentionType,
        retention_param=rp.retentionParam,
        retention_max=rp.retentionMax,
        tags=list(msg.tags.tag) if msg.HasField("tags") else None,
    )


def _cut(entries: Any) -> dict[int, int]:
    return {int(k): int(v) for k, v in entries.items()}


class Service(pb_grpc.ControllerServiceServicer):
    auth: Any = None  # auth.controller_auth.ControllerAuth when auth is on (README "Security")

    def __init__(
        self,
        streams: Streams,
        txns: Transactions,
        endpoint: tuple[str, int],
        self_uri: tuple[str, int],
    ) -> None:
        self.streams = streams
        self.txns = txns
        self.groups: Groups | None = None  # reader groups and key-value tables (groups.py)
        self.endpoint = endpoint  # the wire listener every segment is served from
        self.self_uri = self_uri  # this controller
        self.rpc_counts: Counter[tuple[str, str]] = Counter()
        # Seconds from a handler's start to its reply, by method (the server's side only:
        # not the gRPC transport nor the client); RPC_BUCKETS has the 20 ms target edge.
        self.rpc_seconds: dict[str, Histogram] = {}

    def _timed(self, method: str, seconds: float) -> None:
        h = self.rpc_seconds.get(method)
        if h is None:
            h = self.rpc_seconds[method] = Histogram(RPC_BUCKETS)
        h.observe(seconds)

    # ------------------------------------------------------------------ helpers

    def _info(self, rec: StreamRecord) -> Any:
        return pb.StreamInfo(scope=rec.scope, stream=rec.stream)

    def _range(self, rec: StreamRecord, sid: int) -> Any:
        seg = rec.segments[sid]
        return pb.SegmentRange(
            segmentId=pb.SegmentId(streamInfo=self._info(rec), segmentId=sid),
            minKey=seg.lo,
            maxKey=seg.hi,
        )

    def _ranges(self, rec: StreamRecord, ids: list[int]) -> Any:
        return pb.SegmentRanges(segmentRanges=[self._range(rec, s) for s in ids])

    def _stream(self, info: Any) -> StreamRecord | None:
        return self.streams.get(info.scope, info.stream)

    def _txn(self, req: Any) -> TxnRecord:
        info = req.streamInfo
        return self.txns.find(info.scope, info.stream, req.txnId.highBits, req.txnId.lowBits)

    # ------------------------------------------------------------------ scopes

    @_counted
    async def createScope(self, request: Any, context: Ctx) -> Any:
        return pb.CreateScopeStatus(status=await self.streams.create_scope(request.scope))

    @_counted
    async def deleteScope(self, request: Any, context: Ctx) -> Any:
        return pb.DeleteScopeStatus(status=await self.streams.delete_scope(request.scope))

    @_counted
    async def checkScopeExists(self, request: Any, context: Ctx) -> Any:
        return pb.ExistsResponse(exists=request.scope in self.streams.md.scopes)

    @_counted
    async def listScopes(self, request: Any, context: Ctx) -> Any:
        view = caller_visibility()  # auth on: only what the caller has grants on
        names, token = self.streams.list_scopes(
            request.continuationToken.token, None if view is None else view.scope
        )
        return pb.ScopesResponse(scopes=names, continuationToken=pb.ContinuationToken(token=token))

    @_counted
    async def listStreamsInScope(self, request: Any, context: Ctx) -> Any:
        scope = request.scope.scope
        view = caller_visibility()
        if scope not in self.streams.md.scopes or (view is not None and not view.scope(scope)):
            # A scope the caller may not see is answered as missing, as listScopes hides it.
            return pb.StreamsInScopeResponse(status="SCOPE_NOT_FOUND")
        names, token = self.streams.list_streams(
            scope, request.continuationToken.token, None if view is None else view.stream
        )
        return pb.StreamsInScopeResponse(
            streams=[pb.StreamInfo(scope=scope, stream=n) for n in names],
            continuationToken=pb.ContinuationToken(token=token),
        )

    # ------------------------------------------------------------------ streams

    @_counted
    async def createStream(self, request: Any, context: Ctx) -> Any:
        info = request.streamInfo
        status = await self.streams.create_stream(info.scope, info.stream, _config(request))
        return pb.CreateStreamStatus(status=status)

    @_counted
    async def updateStream(self, request: Any, context: Ctx) -> Any:
        info = request.streamInfo
        status = await self.streams.update_stream(info.scope, info.stream, _config(request))
        return pb.UpdateStreamStatus(status=status)

    @_counted
    async def sealStream(self, request: Any, context: Ctx) -> Any:
        # The seal is durable before the open transactions are aborted: a crash between the
        # two leaves a sealed stream whose open transactions startup aborts, never aborted
        # transactions on a stream that is still open.
        status = await self.streams.seal_stream(request.scope, request.stream)
        if status == "SUCCESS":
            await self.txns.abort_open(request.scope, request.stream)
        return pb.UpdateStreamStatus(status=status)

    @_counted
    async def deleteStream(self, request: Any, context: Ctx) -> Any:
        status = await self.streams.delete_stream(request.scope, request.stream)
        return pb.DeleteStreamStatus(status=status)

    @_counted
    async def truncateStream(self, request: Any, context: Ctx) -> Any:
        info = request.streamInfo
        if info.scope not in self.streams.md.scopes:
            return pb.UpdateStreamStatus(status="SCOPE_NOT_FOUND")
        status = await self.streams.truncate(info.scope, info.stream, _cut(request.cut))
        return pb.UpdateStreamStatus(status=status)

    @_counted
    async def checkStreamExists(self, request: Any, context: Ctx) -> Any:
        return pb.ExistsResponse(exists=self._stream(request) is not None)

    @_counted
    async def getStreamConfiguration(self, request: Any, context: Ctx) -> Any:
        rec = self._stream(request)
        if rec is None:
            raise TxnNotFound(f"stream {request.scope}/{request.stream}")
        c = rec.config
        msg = pb.StreamConfig(
            streamInfo=self._info(rec),
            scalingPolicy=pb.ScalingPolicy(
                scaleType=c.scale_type,
                targetRate=c.target_rate,
                scaleFactor=c.scale_factor,
                minNumSegments=c.min_segments,
            ),
            retentionPolicy=pb.RetentionPolicy(
                retentionType=c.retention_type,
                retentionParam=c.retention_param,
                retentionMax=c.retention_max,
            ),
        )
        if c.tags is not None:
            msg.tags.tag.extend(c.tags)
        return msg

    # ------------------------------------------------------------------ segments

    @_counted
    async def getCurrentSegments(self, request: Any, context: Ctx) -> Any:
        rec = self._stream(request)
        if rec is None or rec.state != "active":
            return pb.SegmentRanges()  # empty = sealed (or gone), as the clients read it
        return self._ranges(rec, rec.current.segments)

    @_counted
    async def getEpochSegments(self, request: Any, context: Ctx) -> Any:
        rec = self._stream(request.streamInfo)
        epoch = None if rec is None else rec.epoch(request.epoch)
        if rec is None or epoch is None:
            raise BadRequest(f"no epoch {request.epoch} in stream {request.streamInfo.stream}")
        return self._ranges(rec, epoch.segments)

    @_counted
    async def getSegments(self, request: Any, context: Ctx) -> Any:
        rec = self._stream(request.streamInfo)
        if rec is None:
            raise TxnNotFound(f"stream {request.streamInfo.scope}/{request.streamInfo.stream}")
        cut = self.streams.segments_at(rec, request.timestamp)
        info = self._info(rec)
        return pb.SegmentsAtTime(
            segments=[
                pb.SegmentsAtTime.SegmentLocation(
                    segmentId=pb.SegmentId(streamInfo=info, segmentId=s), offset=off
                )
                for s, off in sorted(cut.items())
            ]
        )

    async def _successors(self, request: Any) -> Any:
        rec = self._stream(request.streamInfo)
        if rec is None:
            return pb.SuccessorResponse()
        return pb.SuccessorResponse(
            segments=[
                pb.SuccessorResponse.SegmentEntry(segment=self._range(rec, s), value=preds)
                for s, preds in sorted(rec.successors(request.segmentId).items())
            ]
        )

    @_counted
    async def getSegmentsImmediatelyFollowing(self, request: Any, context: Ctx) -> Any:
        return await self._successors(request)

    @_counted
    async def getSegmentsImmediatlyFollowing(self, request: Any, context: Ctx) -> Any:
        return await self._successors(request)

    @_counted
    async def getSegmentsBetween(self, request: Any, context: Ctx) -> Any:
        rec = self._stream(request.streamInfo)
        if rec is None:
            raise TxnNotFound(f"stream {request.streamInfo.scope}/{request.streamInfo.stream}")
        start, end = _cut(getattr(request, "from")), _cut(request.to)
        for cut in (start, end):
            if cut and not rec.valid_cut(cut):
                raise BadRequest("not a valid stream cut")
        info = self._info(rec)
        return pb.StreamCutRangeResponse(
            segments=[
                pb.SegmentId(streamInfo=info, segmentId=s)
                for s in self.streams.segments_between(rec, start, end)
            ]
        )

    @_counted
    async def isSegmentValid(self, request: Any, context: Ctx) -> Any:
        rec = self._stream(request.streamInfo)
        ok = rec is not None and rec.state == "active" and request.segmentId in rec.current.segments
        return pb.SegmentValidityResponse(response=ok)

    @_counted
    async def isStreamCutValid(self, request: Any, context: Ctx) -> Any:
        rec = self._stream(request.streamInfo)
        return pb.StreamCutValidityResponse(
            response=rec is not None and rec.valid_cut(_cut(request.cut))
        )

    @_counted
    async def getURI(self, request: Any, context: Ctx) -> Any:
        # One store serves every segment, including ones the controller never made (the
        # official client's reader-group tables).
        return pb.NodeUri(endpoint=self.endpoint[0], port=self.endpoint[1])

    @_counted
    async def getControllerServerList(self, request: Any, context: Ctx) -> Any:
        return pb.ServerResponse(
            nodeURI=[pb.NodeUri(endpoint=self.self_uri[0], port=self.self_uri[1])]
        )

    @_counted
    async def getDelegationToken(self, request: Any, context: Ctx) -> Any:
        if self.auth is None:
            return pb.DelegationToken(delegationToken="")  # auth is off: the empty token
        return pb.DelegationToken(delegationToken=await self.auth.grpc_token(request, context))

    # ------------------------------------------------------------------ scaling

    @_counted
    async def scale(self, request: Any, context: Ctx) -> Any:
        info = request.streamInfo
        ranges = [(r.start, r.end) for r in request.newKeyRanges]
        status, rec = await self.streams.scale(
            info.scope, info.stream, list(request.sealedSegments), ranges
        )
        if rec is None:
            return pb.ScaleResponse(status=status)
        cur = rec.current
        created = [s for s in cur.segments if s >> 32 == cur.epoch]
        return pb.ScaleResponse(
            status=status,
            segments=[self._range(rec, s) for s in created],
            epoch=cur.epoch,
        )

    @_counted
    async def checkScale(self, request: Any, context: Ctx) -> Any:
        rec = self._stream(request.streamInfo)
        if rec is None or not 0 <= request.epoch < len(rec.epochs):
            return pb.ScaleStatusResponse(status="INVALID_INPUT")
        # Scales finish before ``scale`` answers, except while a crash is being recovered.
        busy = rec.pending is not None and request.epoch == len(rec.epochs) - 1
        return pb.ScaleStatusResponse(status="IN_PROGRESS" if busy else "SUCCESS")

    # ------------------------------------------------------------------ transactions

    @_counted
    async def createTransaction(self, request: Any, context: Ctx) -> Any:
        info = request.streamInfo
        txn, rec = await self.txns.create(info.scope, info.stream, request.lease)
        return pb.CreateTxnResponse(
            txnId=pb.TxnId(highBits=to_signed64(txn.high), lowBits=to_signed64(txn.low)),
            activeSegments=[self._range(rec, s) for s in txn.segments],
        )

    async def _end_txn(self, request: Any, action: Callable[[TxnRecord], Awaitable[str]]) -> Any:
        if self._stream(request.streamInfo) is None:
            return pb.TxnStatus(status="STREAM_NOT_FOUND")
        try:
            txn = self._txn(request)
        except TxnNotFound:
            return pb.TxnStatus(status="TRANSACTION_NOT_FOUND")
        return pb.TxnStatus(status=await action(txn))

    @_counted
    async def commitTransaction(self, request: Any, context: Ctx) -> Any:
        return await self._end_txn(request, self.txns.commit)

    @_counted
    async def abortTransaction(self, request: Any, context: Ctx) -> Any:
        return await self._end_txn(request, self.txns.abort)

    @_counted
    async def pingTransaction(self, request: Any, context: Ctx) -> Any:
        try:
            txn = self._txn(request)
        except TxnNotFound:
            return pb.PingTxnStatus(status="UNKNOWN")
        return pb.PingTxnStatus(status=await self.txns.ping(txn, request.lease))

    @_counted
    async def checkTransactionState(self, request: Any, context: Ctx) -> Any:
        txn = self._txn(request)  # unknown: NOT_FOUND (UNKNOWN would make the client retry)
        return pb.TxnState(state=txn.state)

    # ------------------------------------------------------------------ reader groups

    def _groups(self) -> Groups:
        if self.groups is None:
            raise BadRequest("reader groups and key-value tables are not available")
        return self.groups

    def _group_config(self, record: dict[str, Any]) -> Any:
        cfg = pb.ReaderGroupConfiguration.FromString(Groups.config_of(record))
        cfg.scope, cfg.readerGroupName = record["scope"], record["name"]
        cfg.readerGroupId, cfg.generation = record["id"], record["generation"]
        return cfg

    @_counted
    async def createReaderGroup(self, request: Any, context: Ctx) -> Any:
        status, record = await self._groups().create_group(
            request.scope, request.readerGroupName, request.readerGroupId,
            request.SerializeToString(),
        )  # fmt: skip
        reply = pb.CreateReaderGroupResponse(status=status)
        if record is not None:
            reply.config.CopyFrom(self._group_config(record))
        return reply

    @_counted
    async def getReaderGroupConfig(self, request: Any, context: Ctx) -> Any:
        record = self._groups().group(request.scope, request.readerGroup)
        if record is None:
            return pb.ReaderGroupConfigResponse(status="RG_NOT_FOUND")
        return pb.ReaderGroupConfigResponse(status="SUCCESS", config=self._group_config(record))

    @_counted
    async def updateReaderGroup(self, request: Any, context: Ctx) -> Any:
        status, generation = await self._groups().update_group(
            request.scope, request.readerGroupName, request.generation,
            request.SerializeToString(),
        )  # fmt: skip
        return pb.UpdateReaderGroupResponse(status=status, generation=generation)

    @_counted
    async def deleteReaderGroup(self, request: Any, context: Ctx) -> Any:
        status = await self._groups().delete_group(
            request.scope, request.readerGroup, request.readerGroupId
        )
        return pb.DeleteReaderGroupStatus(status=status)

    # ------------------------------------------------------------------ key-value tables

    @_counted
    async def createKeyValueTable(self, request: Any, context: Ctx) -> Any:
        status = await self._groups().create_table(
            request.scope, request.kvtName, request.partitionCount
        )
        return pb.CreateKeyValueTableStatus(status=status)

    @_counted
    async def getCurrentSegmentsKeyValueTable(self, request: Any, context: Ctx) -> Any:
        record = self._groups().table(request.scope, request.kvtName)
        if record is None:
            raise TxnNotFound(f"key-value table {request.scope}/{request.kvtName}")
        info = pb.StreamInfo(scope=request.scope, stream=request.kvtName)
        return pb.SegmentRanges(
            segmentRanges=[
                pb.SegmentRange(
                    segmentId=pb.SegmentId(streamInfo=info, segmentId=n), minKey=lo, maxKey=hi
                )
                for n, (lo, hi) in enumerate(even_ranges(int(record["partitions"])))
            ]
        )

    @_counted
    async def listKeyValueTablesInScope(self, request: Any, context: Ctx) -> Any:
        scope = request.scope.scope
        view = caller_visibility()
        if scope not in self.streams.md.scopes or (view is not None and not view.scope(scope)):
            return pb.KVTablesInScopeResponse(status="SCOPE_NOT_FOUND")
        names, token = self._groups().list_tables(scope, request.continuationToken.token)
        return pb.KVTablesInScopeResponse(
            kvtables=[pb.KeyValueTableInfo(scope=scope, kvtName=n) for n in names],
            continuationToken=pb.ContinuationToken(token=token),
        )

    @_counted
    async def deleteKeyValueTable(self, request: Any, context: Ctx) -> Any:
        status = await self._groups().delete_table(request.scope, request.kvtName)
        return pb.DeleteKVTableStatus(status=status)


__all__ = ["TXN_OPEN", "Service", "now_ms"]
