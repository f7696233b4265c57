"""A small asyncio client of the controller's gRPC interface (Pravega's ControllerService).

Contract: one ``grpc.aio`` channel per :class:`ControllerClient`, opened on first use. Each
method sends one RPC with the client's request timeout and returns plain Python values
(ids, ranges, cuts), never protobuf messages. A status other than success raises the
SDK error that names it (:class:`StreamError` and subclasses); an unreachable controller
raises :class:`ConnectFailed` (at once when it never answered; once it has, a call safe
to repeat is retried for up to the timeout first), a timed-out call :class:`Timeout`, any
call after ``close`` :class:`ClientClosed`. A missing scope or stream raises
:class:`NoSuchStream` from every call (an empty answer is checked with checkStreamExists
before it is trusted). ``grpcio`` is needed
(the ``streams`` extra); without it the first call raises one clear error naming the extra.
A ``tls://`` controller gets a TLS channel verified with ``tls_ca_file`` (or the system's
CAs); with ``credentials`` every call carries the HTTP ``authorization`` header the
controller checks (Basic for a user and password, Bearer for a static token), and a
refusal (UNAUTHENTICATED, PERMISSION_DENIED) raises :class:`AuthenticationFailed`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..auth import authorization_header
from ..connection import Endpoint
from ..errors import (
    AuthenticationFailed,
    ClientClosed,
    ConnectFailed,
    SegmentStoreError,
    Timeout,
)
from .routing import KeyRange, range_problem, tiling_problem

_EXTRA = "streams need grpcio and protobuf: pip install 'segmentstore[streams]'"
# Calls that may be repeated without changing the outcome (reads; commit, abort and ping
# of a transaction are idempotent); creating, scaling, sealing... are never retried.
_RETRIED = frozenset(
    {
        "getCurrentSegments", "getEpochSegments", "getSegmentsImmediatelyFollowing",
        "getSegments", "getSegmentsBetween", "checkStreamExists", "checkScopeExists",
        "getStreamConfiguration", "listScopes", "listStreamsInScope", "isStreamCutValid",
        "checkTransactionState", "commitTransaction", "abortTransaction", "pingTransaction",
        "getURI", "getDelegationToken",
    }
)  # fmt: skip
_RETRY_FIRST_S, _RETRY_MAX_S = 0.05, 1.0
# gRPC's own reconnect backoff grows to 120 s; keep it near ours so a controller that
# comes back is seen within a second. Not "grpc.min_reconnect_backoff_ms": gRPC uses it as
# the deadline of each TCP connect too, and at 100 ms a connect to a busy host (a SYN
# dropped and resent after 1 s) failed calls that are never retried.
_CHANNEL = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
)


class StreamError(SegmentStoreError):
    """The controller refused a stream or scope operation; ``status`` names its reply."""

    def __init__(self, message: str, status: str = "") -> None:
        super().__init__(message)
        self.status = status


INVALID_REPLY = "INVALID_REPLY"  # StreamError.status of a reply that cannot be true


class NoSuchStream(StreamError):
    """The scope or stream does not exist."""


class StreamExists(StreamError):
    """The scope or stream exists already."""


def _modules() -> tuple[Any, Any, Any]:
    try:
        import grpc

        from ..controller_proto import controller_pb2, controller_pb2_grpc
    except ImportError as e:
        raise ImportError(f"{_EXTRA} ({e})") from None
    return grpc, controller_pb2, controller_pb2_grpc


def split_stream(name: str) -> tuple[str, str]:
    """``"scope/stream"`` -> ``("scope", "stream")``; ValueError for anything else."""
    scope, sep, stream = name.partition("/")
    if not sep or not scope or not stream or "/" in stream:
        raise ValueError(f"a stream is named 'scope/stream', not {name!r}")
    return scope, stream


def segment_name(scope: str, stream: str, segment_id: int) -> str:
    """The segment store's name of a stream segment (Pravega's qualified name)."""
    return f"{scope}/{stream}/{segment_id & 0xFFFFFFFF}.#epoch.{segment_id >> 32}"


@dataclass(frozen=True, slots=True)
class Successor:
    """A segment created by a scale, with its key range and its predecessors' ids."""

    range: KeyRange
    predecessors: tuple[int, ...]


class ControllerClient:
    """Calls the controller at ``uri`` (``tcp://host:port`` or ``tls://host:port``)."""

    def __init__(
        self,
        uri: str,
        timeout: float = 30.0,
        *,
        tls_ca_file: str = "",
        credentials: tuple[str, str] | str | None = None,
    ) -> None:
        self.uri = uri
        self.timeout = timeout
        self._ca_file = tls_ca_file
        self._metadata = (
            None if credentials is None else (("authorization", authorization_header(credentials)),)
        )
        self._channel: Any = None
        self._stub: Any = None
        self.pb: Any = None
        self._grpc: Any = None
        self._closed = False
        self._reached = False  # the controller has answered once: retry when it goes away

    def _ensure(self) -> Any:
        if self._closed:
            raise ClientClosed(f"the controller client of {self.uri} is closed")
        if self._stub is None:
            grpc, pb, pb_grpc = _modules()
            endpoint = Endpoint.parse(self.uri)
            target = endpoint.netloc
            self._grpc, self.pb = grpc, pb
            if endpoint.tls:
                try:
                    root = Path(self._ca_file).read_bytes() if self._ca_file else None
                except OSError as e:
                    raise ConnectFailed(f"cannot read the CA bundle {self._ca_file}: {e}") from e
                creds = grpc.ssl_channel_credentials(root)
                self._channel = grpc.aio.secure_channel(target, creds, options=_CHANNEL)
            else:
                self._channel = grpc.aio.insecure_channel(target, options=_CHANNEL)
            self._stub = pb_grpc.ControllerServiceStub(self._channel)
        return self._stub

    async def close(self) -> None:
        """Close the channel; every later call raises ClientClosed."""
        self._closed = True
        if self._channel is not None:
            channel, self._channel, self._stub = self._channel, None, None
            await channel.close()

    async def call(self, method: str, request: Any) -> Any:
        """One RPC. Once the controller has answered, a call safe to repeat (``_RETRIED``)
        that finds it unreachable is retried with backoff for up to ``timeout`` seconds,
        then raises ConnectFailed; before that (a wrong address) it fails at once."""
        loop = asyncio.get_running_loop()
        deadline = 0.0
        delay = _RETRY_FIRST_S
        while True:  # bounded: the deadline below, or the first answer or error
            stub = self._ensure()
            try:
                reply = await getattr(stub, method)(
                    request, timeout=self.timeout, metadata=self._metadata
                )
            except self._grpc.aio.AioRpcError as e:
                unavailable = e.code() == self._grpc.StatusCode.UNAVAILABLE
                if not (unavailable and self._reached and method in _RETRIED):
                    raise self._error(method, e) from None
                now = loop.time()
                deadline = deadline or now + self.timeout
                if now + delay >= deadline:
                    raise ConnectFailed(
                        f"controller {self.uri} unreachable for {self.timeout:g} s ({method}): "
                        f"{e.details()}"
                    ) from None
                await asyncio.sleep(delay)
                delay = min(delay * 2, _RETRY_MAX_S)
                continue
            self._reached = True
            return reply

    def _error(self, method: str, e: Any) -> SegmentStoreError:
        code = e.code()
        if code == self._grpc.StatusCode.DEADLINE_EXCEEDED:
            return Timeout(f"controller {self.uri}: {method} timed out")
        if code == self._grpc.StatusCode.UNAVAILABLE:
            why = e.details()
            if "Connection refused" in why:  # gRPC's "failed to connect to all addresses; ..."
                why = "connection refused (is a controller listening there?)"
            return ConnectFailed(f"controller {self.uri} unreachable ({method}): {why}")
        if code in (
            self._grpc.StatusCode.UNAUTHENTICATED,
            self._grpc.StatusCode.PERMISSION_DENIED,
        ):
            return AuthenticationFailed(
                f"controller {self.uri} refused {method}: {e.details()}", ""
            )
        if code == self._grpc.StatusCode.NOT_FOUND:
            return NoSuchStream(f"{method}: {e.details()}", "NOT_FOUND")
        return StreamError(f"{method}: {code.name}: {e.details()}", code.name)

    def messages(self) -> Any:
        """The generated protobuf message module (importing grpc on first use)."""
        self._ensure()
        return self.pb

    def info(self, scope: str, stream: str) -> Any:
        self._ensure()
        return self.pb.StreamInfo(scope=scope, stream=stream)

    @staticmethod
    def check(reply: Any, what: str, ok: tuple[str, ...] = ("SUCCESS",)) -> str:
        """The name of ``reply.status``; raises unless it is one of ``ok``."""
        field = reply.DESCRIPTOR.fields_by_name["status"]
        name = str(field.enum_type.values_by_number[reply.status].name)
        if name in ok:
            return name
        if name.endswith("NOT_FOUND"):
            raise NoSuchStream(f"{what}: {name}", name)
        if name.endswith("EXISTS"):
            raise StreamExists(f"{what}: {name}", name)
        raise StreamError(f"{what}: {name}", name)

    # -- segments

    def ranges(self, items: Any, method: str, whole: bool = True) -> list[KeyRange]:
        """The ``SegmentRange`` messages of a reply as key ranges; StreamError
        INVALID_REPLY unless each is sound and (``whole``) together they tile [0, 1) (an
        empty list passes: a sealed stream has no current segments)."""
        ranges = [KeyRange(r.segmentId.segmentId, r.minKey, r.maxKey) for r in items]
        if whole:
            problem = tiling_problem(ranges) if ranges else None
        else:
            problem = next(filter(None, map(range_problem, ranges)), None)
        if problem is not None:
            raise self.invalid_reply(method, problem)
        return ranges

    def invalid_reply(self, method: str, problem: str) -> StreamError:
        """The error for a reply no honest controller sends (nothing is done with it)."""
        return StreamError(
            f"controller {self.uri} sent an invalid {method} reply: {problem}", INVALID_REPLY
        )

    async def require_stream(self, scope: str, stream: str, what: str) -> None:
        """Raise :class:`NoSuchStream` (status ``SCOPE_NOT_FOUND`` or ``STREAM_NOT_FOUND``)
        unless ``scope/stream`` exists: the check behind a reply that cannot tell a missing
        stream from an empty answer (a sealed stream has no current segments)."""
        if (await self.call("checkStreamExists", self.info(scope, stream))).exists:
            return
        scope_info = self.messages().ScopeInfo(scope=scope)
        found = (await self.call("checkScopeExists", scope_info)).exists
        status = "STREAM_NOT_FOUND" if found else "SCOPE_NOT_FOUND"
        raise NoSuchStream(f"{what}: {status}: {scope}/{stream}", status)

    async def current_segments(self, scope: str, stream: str) -> list[KeyRange]:
        """The active segments; empty when the stream is sealed, NoSuchStream if missing."""
        reply = await self.call("getCurrentSegments", self.info(scope, stream))
        ranges = self.ranges(reply.segmentRanges, "getCurrentSegments")
        if not ranges:
            await self.require_stream(scope, stream, "getCurrentSegments")
        return ranges

    async def epoch_segments(self, scope: str, stream: str, epoch: int) -> list[KeyRange]:
        """The segments of ``epoch``; StreamError INVALID_ARGUMENT past the last epoch."""
        req = self.messages().GetEpochSegmentsRequest(
            streamInfo=self.info(scope, stream), epoch=epoch
        )
        try:
            reply = await self.call("getEpochSegments", req)
            return self.ranges(reply.segmentRanges, "getEpochSegments")
        except StreamError as e:
            if e.status == "INVALID_ARGUMENT":  # also the controller's answer for no stream
                await self.require_stream(scope, stream, "getEpochSegments")
            raise

    async def successors(self, scope: str, stream: str, segment: int) -> list[Successor]:
        req = self.messages().SegmentId(streamInfo=self.info(scope, stream), segmentId=segment)
        reply = await self.call("getSegmentsImmediatelyFollowing", req)
        if not reply.segments:  # none: the segment is current, or the stream sealed or gone
            await self.require_stream(scope, stream, "getSegmentsImmediatelyFollowing")
        out = [
            Successor(
                KeyRange(e.segment.segmentId.segmentId, e.segment.minKey, e.segment.maxKey),
                tuple(e.value),
            )
            for e in reply.segments
        ]
        for s in out:
            # A successor is made by a later scale (its epoch, the id's top half, is
            # greater) and names the segment among its predecessors: anything else could
            # send a writer or reader round a cycle, or back over events it has read.
            problem = range_problem(s.range)
            if problem is None and s.range.segment >> 32 <= segment >> 32:
                problem = f"successor {s.range.segment} is not of a later epoch than {segment}"
            if problem is None and segment not in s.predecessors:
                problem = f"successor {s.range.segment} does not name {segment} as predecessor"
            if problem is not None:
                raise self.invalid_reply("getSegmentsImmediatelyFollowing", problem)
        return out

    async def segments_at(self, scope: str, stream: str, timestamp: int) -> dict[int, int]:
        """The stream cut at ``timestamp`` ms (0: the head): segment id -> offset."""
        req = self.messages().GetSegmentsRequest(
            streamInfo=self.info(scope, stream), timestamp=timestamp
        )
        reply = await self.call("getSegments", req)
        return {loc.segmentId.segmentId: loc.offset for loc in reply.segments}

    async def segments_between(
        self, scope: str, stream: str, start: dict[int, int], end: dict[int, int]
    ) -> list[int]:
        req = self.messages().StreamCutRange(streamInfo=self.info(scope, stream))
        getattr(req, "from").update(start)
        req.to.update(end)
        reply = await self.call("getSegmentsBetween", req)
        return [s.segmentId for s in reply.segments]
