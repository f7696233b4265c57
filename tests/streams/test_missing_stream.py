"""A missing scope or stream: every stream call of the SDK raises ``NoSuchStream`` (never an
empty answer, a wrong error or a half-made group), and any controller call works as a
fresh client's first call."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import segmentstore_client as sc
from controller.conftest import Ctl
from segmentstore_client.errors import NoSuchSegment, SegmentSealed
from segmentstore_client.streams import NoSuchStream, StreamCut
from segmentstore_client.streams.controller_client import ControllerClient


async def test_every_controller_call_works_as_a_first_call(mctl: Ctl, mclient: sc.Client) -> None:
    await mclient.create_scope("first", exist_ok=True)
    await mclient.create_stream("first/s", 2, exist_ok=True)
    calls: dict[str, Callable[[ControllerClient], Awaitable[object]]] = {
        "segments_at": lambda c: c.segments_at("first", "s", 0),
        "current_segments": lambda c: c.current_segments("first", "s"),
        "epoch_segments": lambda c: c.epoch_segments("first", "s", 0),
        "successors": lambda c: c.successors("first", "s", 0),
        "segments_between": lambda c: c.segments_between("first", "s", {}, {}),
    }
    for name, call in calls.items():
        c = ControllerClient(mctl.uri, 10.0)  # a fresh client: this is its first call
        try:
            assert await call(c) is not None, name
        finally:
            await c.close()
    # and a client whose first stream call is the segments_at of Spark's head cut
    async with sc.connect(mctl.server.endpoint, controller=mctl.uri) as fresh:
        assert await fresh.controller.segments_at("first", "s", 0) == {0: 0, 1: 0}


@pytest.mark.parametrize("where", ["stream", "scope"])
async def test_every_call_on_a_missing_stream_raises_no_such_stream(
    mclient: sc.Client, where: str
) -> None:
    await mclient.create_scope("here", exist_ok=True)
    scope = "here" if where == "stream" else "nowhere"
    stream = f"{scope}/nope"
    expected = "STREAM_NOT_FOUND" if where == "stream" else "SCOPE_NOT_FOUND"
    c = mclient.controller
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "current_segments": lambda: c.current_segments(scope, "nope"),
        "segments_at": lambda: c.segments_at(scope, "nope", 0),
        "epoch_segments": lambda: c.epoch_segments(scope, "nope", 0),
        "successors": lambda: c.successors(scope, "nope", 0),
        "segments_between": lambda: c.segments_between(scope, "nope", {}, {}),
        "stream_info": lambda: mclient.stream_info(stream),
        "stream_tags": lambda: mclient.stream_tags(stream),
        "scale by count": lambda: mclient.scale_stream(stream, 2),
        "scale by ranges": lambda: mclient.scale_stream(stream, [(0.0, 1.0)], sealed=[0]),
        "seal": lambda: mclient.seal_stream(stream),
        "delete": lambda: mclient.delete_stream(stream),
        "truncate": lambda: mclient.truncate_stream(StreamCut(stream, {0: 0})),
        "writer start": lambda: mclient.stream_writer(stream).start(),
        "writer write": lambda: mclient.stream_writer(stream).write(b"x", routing_key="k"),
        "begin": lambda: mclient.stream_writer(stream).begin(),
        "group at head": lambda: mclient.reader_group(f"{scope}/g1", [stream]).open(),
        "group at tail": lambda: mclient.reader_group(f"{scope}/g2", [stream], "tail").open(),
        "group at cut": lambda: mclient.reader_group(
            f"{scope}/g3", [stream], StreamCut(stream, {0: 0})
        ).open(),
    }
    wrong: dict[str, str] = {}
    for name, call in calls.items():
        try:
            got = await call()
        except NoSuchStream as e:
            if where == "scope" and name == "seal":
                continue  # the controller's seal says STREAM_NOT_FOUND for both
            if e.status not in (expected, "NOT_FOUND"):
                wrong[name] = f"status {e.status}"
            continue
        except Exception as e:
            wrong[name] = f"{type(e).__name__}: {e}"
            continue
        wrong[name] = f"returned {got!r}"
    assert not wrong
    # no half-made group: the failed opens created no state table (nor a scope's tables)
    for g in ("g1", "g2", "g3"):
        with pytest.raises(NoSuchSegment):
            await mclient.segment_info(f"{scope}/_tables/rg.{g}")


async def test_sealed_stream_is_still_empty_not_missing(mclient: sc.Client) -> None:
    await mclient.create_scope("sealed", exist_ok=True)
    await mclient.create_stream("sealed/s", 2)
    await mclient.seal_stream("sealed/s")
    assert await mclient.controller.current_segments("sealed", "s") == []
    with pytest.raises(SegmentSealed):
        await mclient.stream_writer("sealed/s").start()
    info = await mclient.stream_info("sealed/s")
    assert info.sealed and len(info.epochs) == 1
