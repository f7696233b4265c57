"""kill -9 of the server while the official client writes, and in the middle of a scale, a
transaction commit and a stream delete:
after a restart on the same ports every acknowledged event is read exactly once, per-key
order holds, and the stream keeps working."""

from __future__ import annotations

import contextlib
import re
import threading
import time
from pathlib import Path

import pytest
from segmentstore_client.controller_proto import controller_pb2 as pb
from segmentstore_client.errors import NoSuchSegment

from .conftest import (
    Ctl,
    check_events,
    create_stream,
    finish_driver,
    run_driver,
    start_driver,
    stream_info,
    wait_ready,
)
from .test_scale import segment_info

pytestmark = pytest.mark.timeout(300)


def _wait_log(ctl: Ctl, text: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(text in line for line in list(ctl.server.log)):
            return True
        time.sleep(0.005)
    return False


def test_kill_9_during_writes_then_every_acknowledged_event_once(ctl: Ctl, tmp_path: Path) -> None:
    stub = ctl.stub()
    create_stream(stub, "k", "s", 3)
    total, keys = 6000, 6
    acked = tmp_path / "acked.txt"
    writer = start_driver(
        "write", uri=ctl.uri, scope="k", stream="s", count=total, keys=keys,
        acked_file=str(acked), pace=[200, 0.05],
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (not acked.exists() or len(acked.read_text()) < 2000):
        time.sleep(0.05)
    ctl.server.kill()
    before = len(acked.read_text().splitlines())
    assert 0 < before < total  # killed in the middle
    ctl.restart()
    w = finish_driver(writer, timeout=180)  # the client reconnects and resends
    assert w["written"] == total
    out = tmp_path / "events.txt"
    r = run_driver(
        "read",
        uri=ctl.uri,
        scope="k",
        stream="s",
        group="g",
        count=total,
        out_file=str(out),
        seconds=60,
    )
    assert r["read"] == total
    check_events(out.read_text().splitlines(), keys=keys, per_key=total // keys)


def test_kill_9_in_the_middle_of_a_scale_finishes_it_on_restart(ctl: Ctl, tmp_path: Path) -> None:
    stub = ctl.stub()
    create_stream(stub, "m", "s", 2)
    run_driver("write", uri=ctl.uri, scope="m", stream="s", count=600, keys=6)
    first = tmp_path / "first.txt"
    r = run_driver(
        "read", uri=ctl.uri, scope="m", stream="s", group="g1", count=600, out_file=str(first)
    )
    assert r["read"] == 600
    check_events(first.read_text().splitlines(), keys=6, per_key=100)
    lengths = [segment_info(ctl, f"m/s/{i}.#epoch.0").length for i in (0, 1)]
    # A split into many segments takes long enough (one durable create each) to be cut.
    parts = 1000
    ranges = [
        (0.5 * i / parts, 0.5 * (i + 1) / parts if i < parts - 1 else 0.5) for i in range(parts)
    ]
    req = pb.ScaleRequest(
        streamInfo=stream_info("m", "s"),
        sealedSegments=[0],
        newKeyRanges=[pb.ScaleRequest.KeyRangeEntry(start=a, end=b) for a, b in ranges],
    )
    caller = threading.Thread(
        target=lambda: _ignore_errors(lambda: stub.scale(req, timeout=60)), daemon=True
    )
    caller.start()
    assert _wait_log(ctl, "scaling m/s", 20)
    # checkScale answers IN_PROGRESS for epoch 0 once the "scale" record is durable and
    # while the thousand segments are being created: kill then (not by a fixed delay,
    # which a fast scale outruns and a slow fsync under load comes too early for).
    status = pb.ScaleStatusRequest(streamInfo=stream_info("m", "s"), epoch=0)
    deadline = time.monotonic() + 20
    while stub.checkScale(status).status != pb.ScaleStatusResponse.IN_PROGRESS:
        assert time.monotonic() < deadline, "the scale never showed as in progress"
    ctl.server.kill()
    ctl.restart()
    assert any(
        "finishing scale of m/s" in line or "finishing seal of m/s" in line
        for line in ctl.server.log
    )
    caller.join(timeout=60)
    stub = ctl.stub()
    current = stub.getCurrentSegments(stream_info("m", "s")).segmentRanges
    assert len(current) == parts + 1
    assert segment_info(ctl, "m/s/0.#epoch.0").sealed
    assert segment_info(ctl, f"m/s/{1 + parts}.#epoch.1").length == 0  # exists, empty
    # The stream keeps working: merge the thousand back into one, write, read everything.
    new_ids = [r.segmentId.segmentId for r in current if r.segmentId.segmentId != 1]
    merge = pb.ScaleRequest(
        streamInfo=stream_info("m", "s"),
        sealedSegments=new_ids,
        newKeyRanges=[pb.ScaleRequest.KeyRangeEntry(start=0.0, end=0.5)],
    )
    assert stub.scale(merge).status == pb.ScaleResponse.STARTED
    assert [segment_info(ctl, f"m/s/{i}.#epoch.0").length for i in (0, 1)] == lengths
    # New events are read by a tail reader (walking a thousand empty segments from the
    # head is slow in the official client, and those bytes were checked above).
    out = tmp_path / "events.txt"
    reader = start_driver(
        "read", uri=ctl.uri, scope="m", stream="s", group="g2", tail=True, count=600,
        out_file=str(out), seconds=60,
    )  # fmt: skip
    wait_ready(reader)
    run_driver("write", uri=ctl.uri, scope="m", stream="s", count=600, keys=6, start=600)
    assert finish_driver(reader)["read"] == 600
    check_events(out.read_text().splitlines(), keys=6)
    assert len(out.read_text().splitlines()) == 600


def _ignore_errors(fn: object) -> None:
    with contextlib.suppress(Exception):  # the server dies under this call
        fn()  # type: ignore[operator]


def _wait_log_match(ctl: Ctl, pattern: str, timeout: float) -> re.Match[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in list(ctl.server.log):
            m = re.search(pattern, line)
            if m:
                return m
        time.sleep(0.002)
    raise AssertionError(f"no log line matching {pattern!r}")


def _s64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def test_kill_9_in_the_middle_of_a_commit_commits_exactly_once(ctl: Ctl, tmp_path: Path) -> None:
    """The official client commits a transaction on a 256-segment stream; the server dies
    once the commit is durable as COMMITTING and its 256 merges (one durable step each)
    are under way. After the restart the commit is finished: every event once, in order."""
    stub = ctl.stub()
    create_stream(stub, "c", "s", 256)
    per_txn = 400
    driver = start_driver("txn", uri=ctl.uri, scope="c", stream="s", per_txn=per_txn, actions=["commit"])  # fmt: skip
    m = _wait_log_match(ctl, r"committing transaction c/s/([0-9a-f]{32}) \(256 segment", 60)
    ctl.server.kill()
    driver.kill()
    driver.communicate(timeout=30)
    ctl.restart()
    assert any("finishing the commit of transaction" in line for line in ctl.server.log)
    tid = m.group(1)
    req = pb.TxnRequest(
        streamInfo=stream_info("c", "s"),
        txnId=pb.TxnId(highBits=_s64(int(tid[:16], 16)), lowBits=_s64(int(tid[16:], 16))),
    )
    stub = ctl.stub()
    assert stub.checkTransactionState(req).state == pb.TxnState.COMMITTED
    out = tmp_path / "events.txt"
    r = run_driver(
        "read", uri=ctl.uri, scope="c", stream="s", group="g", count=per_txn,
        out_file=str(out), seconds=60,
    )  # fmt: skip
    assert r["read"] == per_txn
    lines = out.read_text().splitlines()
    assert len(lines) == per_txn
    seen = check_events([line[3:] for line in lines], keys=4)
    assert sorted(n for ns in seen.values() for n in ns) == list(range(per_txn))


def test_kill_9_in_the_middle_of_a_delete_finishes_it_on_restart(ctl: Ctl, tmp_path: Path) -> None:
    """deleteStream of a sealed 1,024-segment stream deletes one segment per durable step;
    the server dies once the delete is recorded. The restart finishes it: the stream and
    all its segments are gone and the name can be used again."""
    stub = ctl.stub()
    create_stream(stub, "d", "s", 1024)
    run_driver("write", uri=ctl.uri, scope="d", stream="s", count=200, keys=8)
    assert stub.sealStream(stream_info("d", "s")).status == pb.UpdateStreamStatus.SUCCESS
    caller = threading.Thread(
        target=lambda: _ignore_errors(lambda: stub.deleteStream(stream_info("d", "s"), timeout=60)),
        daemon=True,
    )
    caller.start()
    _wait_log_match(ctl, r"deleting stream d/s \(1024 segment", 30)
    ctl.server.kill()
    ctl.restart()
    assert any("finishing delete of d/s after a restart" in line for line in ctl.server.log)
    caller.join(timeout=60)
    stub = ctl.stub()
    assert not stub.checkStreamExists(stream_info("d", "s")).exists
    for n in (0, 511, 1023):
        with pytest.raises(NoSuchSegment):
            segment_info(ctl, f"d/s/{n}.#epoch.0")
    create_stream(stub, "d", "s", 2)  # the name is free again, with new, empty segments
    run_driver("write", uri=ctl.uri, scope="d", stream="s", count=100, keys=4)
    out = tmp_path / "events.txt"
    r = run_driver("read", uri=ctl.uri, scope="d", stream="s", group="g", count=100, out_file=str(out))  # fmt: skip
    assert r["read"] == 100
    check_events(out.read_text().splitlines(), keys=4, per_key=25)
