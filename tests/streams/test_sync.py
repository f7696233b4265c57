"""The blocking twins of the stream API, against a real server and controller."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor, wait

import pytest
import segmentstore_client as sc
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


def test_sync_transactions(ctl: Ctl) -> None:
    with sync.connect(ctl.server.endpoint, controller=controller_uri(ctl.server)) as c:
        c.create_scope("x")
        c.create_stream("x/s", 2)
        with c.stream_writer("x/s") as w:
            txn = w.begin()
            for n in range(10):
                txn.write(f"k:{n}".encode(), routing_key="k")
            assert txn.check_state() == "OPEN" and txn.state == "open"
            info = c.stream_info("x/s")
            assert sum(s.events for s in info.segments.values()) == 0  # none visible yet
            txn.commit()
            assert txn.state == "committed"
            dropped = w.begin()
            dropped.write(b"k:99", routing_key="k")
            dropped.abort()
            assert dropped.check_state() in ("ABORTING", "ABORTED")
            with pytest.raises(sc.WriterClosed):
                dropped.write(b"late")
        group = c.reader_group("x/g", ["x/s"])
        got = [ev.data for ev in group.reader("r").events(idle_timeout=1)]
        assert got == [f"k:{n}".encode() for n in range(10)]


def test_sync_reader_group_shares_checkpoints_resets_and_deletes(ctl: Ctl) -> None:
    keys, per_key = 20, 25
    with sync.connect(ctl.server.endpoint, controller=controller_uri(ctl.server)) as c:
        c.create_scope("z")
        c.create_stream("z/s", 4)
        with c.stream_writer("z/s") as w:
            for n in range(per_key):
                w.write_many(
                    [f"k{i}:{n}".encode() for i in range(keys)],
                    routing_keys=[f"k{i}" for i in range(keys)],
                )
        group = c.reader_group("z/g", ["z/s"], sync_interval=0.1)
        readers = [group.reader(f"r{i}").join() for i in range(2)]
        outs: list[list[str]] = [[], []]

        def drain(i: int) -> None:
            for ev in readers[i]:  # a plain for loop, ended by close() below
                outs[i].append(ev.data.decode())
                if len(outs[0]) + len(outs[1]) == keys * per_key:
                    return

        with ThreadPoolExecutor(3) as pool:
            done = [pool.submit(drain, i) for i in range(2)]
            cuts = pool.submit(group.checkpoint, "cp", timeout=30).result(60)
            wait(done, timeout=30, return_when="FIRST_COMPLETED")
            for r in readers:
                r.close()  # the other loop ends at its next event or sync
            for f in done:
                f.result(30)
        lines = outs[0] + outs[1]
        assert sorted(lines) == sorted(f"k{i}:{n}" for i in range(keys) for n in range(per_key))
        assert all(outs)  # both readers got segments
        assert StreamCut.from_json(cuts[0].to_json()) == cuts[0]
        assert group.state()["heartbeats"] == {}
        # reset to the head: a new reader reads everything again, in key order
        group.reset("head")
        again = [ev.data.decode() for ev in group.reader("r3").events(idle_timeout=1)]
        assert sorted(again) == sorted(lines)
        group.reader_offline("r3")
        assert group.delete() and not group.delete(missing_ok=True)
        with pytest.raises(sc.NoSuchSegment):
            c.table_info("z/_tables/rg.g")
