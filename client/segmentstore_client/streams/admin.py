"""Stream administration on the client: scopes, streams, policies, seal, truncate, scale,
stream info. :class:`StreamAdmin` is a base of :class:`~segmentstore_client.Client`.

Contract: every call goes to the controller (one gRPC call, or a few for ``stream_info``
and ``delete_stream``) through one lazily made :class:`ControllerClient`; ``stream_info``
also asks the segment store for each segment's length and event count. Names are
``"scope/stream"``; errors are :class:`StreamError` (``NoSuchStream``, ``StreamExists``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..admin import AdminClient
from ..errors import ClientClosed, NoSuchSegment
from .controller_client import ControllerClient, StreamError, segment_name, split_stream
from .policies import RetentionPolicy, ScalingPolicy, SegmentStats, StreamInfo
from .routing import KeyRange
from .stream_cut import StreamCut

if TYPE_CHECKING:
    from ..connection import ConnectionOptions, Endpoint

DEFAULT_CONTROLLER_PORT = 9090


class StreamAdmin(AdminClient):
    """Scopes and streams, over the controller at ``controller`` (default: the segment
    store's host, port 9090, with TLS when the endpoint is ``tls://``); delegation tokens
    come from it too."""

    def __init__(
        self, endpoint: str | Endpoint, options: ConnectionOptions, controller: str = ""
    ) -> None:
        super().__init__(endpoint, options)
        # With TLS on, every port of the store speaks it: tls:// for a tls:// endpoint.
        default = dataclasses.replace(self.endpoint, port=DEFAULT_CONTROLLER_PORT)
        self.controller_uri = controller or options.controller or str(default)
        if not options.controller:  # delegation tokens come from the same controller
            self.options = dataclasses.replace(self.options, controller=self.controller_uri)
        self._controller_client: ControllerClient | None = None
        self._controller_closed = False

    @property
    def controller(self) -> ControllerClient:
        """The controller client (made on first use; its channel opens on the first call);
        ClientClosed once the client is closed."""
        if self._controller_closed:
            raise ClientClosed("the client is closed")
        if self._controller_client is None:
            self._controller_client = ControllerClient(
                self.controller_uri,
                self.options.request_timeout,
                tls_ca_file=self.options.tls_ca_file,
                credentials=self.options.credentials,
            )
        return self._controller_client

    async def _close_controller(self) -> None:
        self._controller_closed = True
        if self._controller_client is not None:
            await self._controller_client.close()

    # -- scopes

    async def create_scope(self, scope: str, *, exist_ok: bool = False) -> bool:
        """Create a scope; False if it existed (with ``exist_ok``, else StreamExists).

        Example::

            await client.create_scope("shop", exist_ok=True)
        """
        c = self.controller
        reply = await c.call("createScope", c.messages().ScopeInfo(scope=scope))
        ok = ("SUCCESS", "SCOPE_EXISTS") if exist_ok else ("SUCCESS",)
        return c.check(reply, f"create scope {scope!r}", ok) == "SUCCESS"

    async def delete_scope(self, scope: str, *, missing_ok: bool = False) -> bool:
        """Delete an empty scope; False if it was missing (with ``missing_ok``).

        Example::

            await client.delete_scope("shop")
        """
        c = self.controller
        reply = await c.call("deleteScope", c.messages().ScopeInfo(scope=scope))
        ok = ("SUCCESS", "SCOPE_NOT_FOUND") if missing_ok else ("SUCCESS",)
        return c.check(reply, f"delete scope {scope!r}", ok) == "SUCCESS"

    async def list_scopes(self) -> list[str]:
        """Every scope's name, sorted.

        Example::

            print(await client.list_scopes())
        """
        c = self.controller
        pb = c.messages()
        out: list[str] = []
        token = ""
        for _ in range(100_000):  # bounded: each page moves the token on
            reply = await c.call(
                "listScopes", pb.ScopesRequest(continuationToken=pb.ContinuationToken(token=token))
            )
            out.extend(reply.scopes)
            if not reply.scopes or reply.continuationToken.token == token:
                break
            token = reply.continuationToken.token
        return out

    async def list_streams(self, scope: str) -> list[str]:
        """The ``scope/stream`` names of a scope's streams, sorted.

        Example::

            print(await client.list_streams("shop"))
        """
        c = self.controller
        pb = c.messages()
        out: list[str] = []
        token = ""
        for _ in range(100_000):
            req = pb.StreamsInScopeRequest(
                scope=pb.ScopeInfo(scope=scope),
                continuationToken=pb.ContinuationToken(token=token),
            )
            reply = await c.call("listStreamsInScope", req)
            c.check(reply, f"list streams of {scope!r}")
            out.extend(f"{s.scope}/{s.stream}" for s in reply.streams)
            if not reply.streams or reply.continuationToken.token == token:
                break
            token = reply.continuationToken.token
        return out

    # -- streams

    async def create_stream(
        self,
        stream: str,
        segments: int = 1,
        *,
        scaling: ScalingPolicy | None = None,
        retention: RetentionPolicy | None = None,
        tags: Sequence[str] = (),
        exist_ok: bool = False,
    ) -> bool:
        """Create ``scope/stream`` with ``segments`` fixed segments (or a ``scaling``
        policy), an optional ``retention`` policy and ``tags``; the scope must exist.
        False if the stream existed (with ``exist_ok``, else StreamExists).

        Example::

            await client.create_scope("shop", exist_ok=True)
            await client.create_stream("shop/orders", 8, exist_ok=True)
        """
        scope, name = split_stream(stream)
        sp = scaling or ScalingPolicy.fixed(segments)
        rp = retention or RetentionPolicy()
        c = self.controller
        pb = c.messages()
        cfg = pb.StreamConfig(
            streamInfo=c.info(scope, name),
            scalingPolicy=pb.ScalingPolicy(
                scaleType=sp.kind,
                targetRate=sp.target_rate,
                scaleFactor=sp.scale_factor,
                minNumSegments=sp.min_segments,
            ),
            retentionPolicy=pb.RetentionPolicy(
                retentionType=rp.kind, retentionParam=rp.limit, retentionMax=rp.max
            ),
            tags=pb.Tags(tag=list(tags)),
        )
        ok = ("SUCCESS", "STREAM_EXISTS") if exist_ok else ("SUCCESS",)
        reply = await c.call("createStream", cfg)
        return c.check(reply, f"create stream {stream!r}", ok) == "SUCCESS"

    async def stream_tags(self, stream: str) -> list[str]:
        """The tags a stream was created with."""
        c = self.controller
        reply = await c.call("getStreamConfiguration", c.info(*split_stream(stream)))
        return list(reply.tags.tag)

    async def seal_stream(self, stream: str) -> None:
        """Seal every segment of a stream: writers get SegmentSealed, readers reach its end.

        Example::

            await client.seal_stream("shop/orders")
        """
        c = self.controller
        reply = await c.call("sealStream", c.info(*split_stream(stream)))
        c.check(reply, f"seal stream {stream!r}")

    async def delete_stream(self, stream: str, *, missing_ok: bool = False) -> bool:
        """Seal (if needed) and delete a stream; False if missing (with ``missing_ok``).

        Example::

            await client.delete_stream("shop/orders")
        """
        c = self.controller
        info = c.info(*split_stream(stream))
        reply = await c.call("sealStream", info)
        ok = ("SUCCESS", "STREAM_NOT_FOUND") if missing_ok else ("SUCCESS", "STREAM_SEALED")
        if c.check(reply, f"seal stream {stream!r}", (*ok, "STREAM_SEALED")) == "STREAM_NOT_FOUND":
            return False
        reply = await c.call("deleteStream", info)
        return c.check(reply, f"delete stream {stream!r}", ok) == "SUCCESS"

    async def truncate_stream(self, cut: StreamCut) -> None:
        """Drop everything before ``cut`` (reads before it raise SegmentTruncated).

        Example::

            await client.truncate_stream(checkpoint_cut)
        """
        c = self.controller
        pb = c.messages()
        msg = pb.StreamCut(streamInfo=c.info(*split_stream(cut.stream)))
        msg.cut.update(cut.positions)
        c.check(await c.call("truncateStream", msg), f"truncate stream {cut.stream!r}")

    async def scale_stream(
        self,
        stream: str,
        new_ranges: int | Sequence[tuple[float, float]],
        *,
        sealed: Sequence[int] | None = None,
    ) -> list[KeyRange]:
        """Replace segments by new ones (a manual scale); returns the new segments.

        ``new_ranges`` is a count (that many equal ranges over the whole key space, all
        current segments sealed) or explicit ``(low, high)`` ranges covering exactly the
        ``sealed`` segments' ranges (default: every current segment).

        Example::

            await client.scale_stream("shop/orders", 5)
        """
        scope, name = split_stream(stream)
        c = self.controller
        pb = c.messages()
        if sealed is None:
            sealed = [r.segment for r in await c.current_segments(scope, name)]
        if isinstance(new_ranges, int):
            if new_ranges < 1:
                raise ValueError("scale to at least one segment")
            step = 1.0 / new_ranges
            new_ranges = [
                (i * step, 1.0 if i == new_ranges - 1 else (i + 1) * step)
                for i in range(new_ranges)
            ]
        req = pb.ScaleRequest(
            streamInfo=c.info(scope, name),
            sealedSegments=list(sealed),
            newKeyRanges=[pb.ScaleRequest.KeyRangeEntry(start=a, end=b) for a, b in new_ranges],
        )
        reply = await c.call("scale", req)
        if reply.status != pb.ScaleResponse.STARTED:  # PRECONDITION_FAILED is also "no stream"
            await c.require_stream(scope, name, f"scale stream {stream!r}")
        c.check(reply, f"scale stream {stream!r}", ("STARTED",))
        return c.ranges(reply.segments, "scale", whole=False)

    async def stream_info(self, stream: str) -> StreamInfo:
        """Segments per epoch, head and tail stream cuts, bytes and events per segment.

        Example::

            info = await client.stream_info("shop/orders")
            print(len(info.epochs), info.tail.to_json())
        """
        scope, name = split_stream(stream)
        c = self.controller
        head = await c.segments_at(scope, name, 0)
        current = await c.current_segments(scope, name)
        epochs: list[list[KeyRange]] = []
        for epoch in range(1_000_000):  # bounded by the stream's epochs
            try:
                epochs.append(await c.epoch_segments(scope, name, epoch))
            except StreamError as e:  # past the last epoch: INVALID_ARGUMENT
                if epoch == 0 or e.status != "INVALID_ARGUMENT":
                    raise
                break
        stats: dict[int, SegmentStats] = {}
        ranges = {r.segment: r for e in epochs for r in e}
        for sid in await c.segments_between(scope, name, head, {}):
            if sid not in ranges:  # of an epoch after those read above (a scale since)
                continue
            seg = segment_name(scope, name, sid)
            try:
                si = await self.segment_info(seg)
            except NoSuchSegment:
                continue
            events = await self.event_count(seg)
            stats[sid] = SegmentStats(
                sid, seg, ranges[sid], si.start_offset, si.length, events, si.sealed
            )
        tail_ids = [r.segment for r in current] or [
            s for s in (r.segment for r in epochs[-1]) if s in stats
        ]
        tail = {s: stats[s].length if s in stats else 0 for s in tail_ids}
        return StreamInfo(
            stream, not current, epochs, StreamCut(stream, head), StreamCut(stream, tail), stats
        )
