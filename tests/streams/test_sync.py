"""The blocking twins of the stream API, against a real server and controller."""

from __future__ import annotations

from controller.conftest import Ctl, controller_uri
from segmentstore_client import sync
from segmentstore_client.streams import StreamCut


def test_sync_admin_and_writer(ctl: Ctl) -> None:
    with sync.connect(ctl.server.endpoint, controller=controller_uri(ctl.server)) as c:
        assert c.create_scope("y")
        assert c.create_stream("y/s", 3, tags=["t"])
        assert c.list_streams("y") == ["y/s"] and c.stream_tags("y/s") == ["t"]
        with c.stream_writer("y/s") as w:
            w.write(b"k:0", routing_key="k").wait(10)
            w.write_many([b"k:1", b"k:2"], routing_keys=["k", "k"]).wait(10)
        assert len(c.scale_stream("y/s", 2)) == 2
        info = c.stream_info("y/s")
        assert sum(s.events for s in info.segments.values()) == 3
        assert StreamCut.from_json(info.tail.to_json()) == info.tail
        c.truncate_stream(info.head)
        c.seal_stream("y/s")
        assert c.delete_stream("y/s") and c.delete_scope("y") and "y" not in c.list_scopes()
