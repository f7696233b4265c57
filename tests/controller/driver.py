"""Drives the official Pravega Python client (PyPI ``pravega``) for the controller tests.

Run as a separate process (the client's blocking calls hold the GIL, so it cannot share a
process with a server): ``python driver.py <command> <json args>``. It prints one JSON
object on the last line of stdout. Events are ``<key>:<n>`` (n counts per key from 0),
optionally padded to ``size`` bytes with ``.``; readers write what they read to a file,
one event per line, and the test checks it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

import pravega_client as pc


def _event(key: str, n: int, size: int) -> str:
    body = f"{key}:{n}"
    return body + "." * max(0, size - len(body))


def write(a: dict[str, Any]) -> dict[str, Any]:
    """Write ``count`` events round-robin over ``keys`` routing keys; ``acked_file`` gets
    the index of every event whose write returned (blocking writes are acknowledged)."""
    m = pc.StreamManager(a["uri"])
    w = m.create_writer(a["scope"], a["stream"], max_inflight_events=a.get("inflight", 0))
    keys, size, start = a.get("keys", 10), a.get("size", 0), a.get("start", 0)
    acked = open(a["acked_file"], "a", buffering=1) if a.get("acked_file") else None  # noqa: SIM115
    t0 = time.perf_counter()
    pause = a.get("pause_at")
    every, nap = a.get("pace", [0, 0.0])  # sleep ``nap`` s after every ``every`` events
    for i in range(start, start + a["count"]):
        key = f"k{i % keys}"
        w.write_event(_event(key, i // keys, size), routing_key=key)
        if acked is not None:
            acked.write(f"{i}\n")
        if every and i % every == every - 1:
            time.sleep(nap)
        if pause is not None and i == pause:
            print("PAUSED", flush=True)
            sys.stdin.readline()
    w.flush()
    return {"written": a["count"], "seconds": time.perf_counter() - t0}


def read(a: dict[str, Any]) -> dict[str, Any]:
    """Read through a new reader group until ``count`` events or ``timeout`` seconds."""
    m = pc.StreamManager(a["uri"])
    if a.get("tail"):
        cfg = pc.StreamReaderGroupConfig(True, a["scope"], a["stream"])
        rg = m.create_reader_group_with_config(a["group"], a["scope"], cfg)
    else:
        rg = m.create_reader_group(a["group"], a["scope"], a["stream"])
    reader = rg.create_reader("reader-1")
    print("READY", flush=True)  # the group exists (a tail group has fixed its start)
    out = open(a["out_file"], "w")  # noqa: SIM115
    got = 0

    async def loop() -> None:
        nonlocal got
        deadline = time.monotonic() + a.get("seconds", 60)
        while got < a["count"] and time.monotonic() < deadline:
            remaining = deadline - time.monotonic()
            try:
                piece = await asyncio.wait_for(reader.get_segment_slice_async(), remaining)
            except TimeoutError:
                break
            for ev in piece:
                out.write(ev.data().decode().rstrip(".") + "\n")
                got += 1
            reader.release_segment(piece)

    t0 = time.perf_counter()
    asyncio.run(loop())
    out.close()
    if got >= a["count"]:  # after a timed-out slice request, going offline can hang
        reader.reader_offline()
    return {"read": got, "seconds": time.perf_counter() - t0}


def admin(a: dict[str, Any]) -> dict[str, Any]:
    m = pc.StreamManager(a["uri"])
    out: dict[str, Any] = {}
    for step in a["steps"]:
        op, args = step[0], step[1:]
        try:
            if op in ("create_stream_with_policy", "update_stream_with_policy"):
                scope, stream, policy, retention, tags = args
                sp = getattr(pc.StreamScalingPolicy, policy[0])(*policy[1:])
                rp = getattr(pc.StreamRetentionPolicy, retention[0])(*retention[1:])
                out[op + ":" + stream] = getattr(m, op)(scope, stream, sp, rp, tags)
            else:
                out[op + ":" + ":".join(map(str, args))] = getattr(m, op)(*args)
        except Exception as e:  # the test checks which calls fail
            out[op + ":" + ":".join(map(str, args))] = f"error: {type(e).__name__}: {e}"
    return out


def txn(a: dict[str, Any]) -> dict[str, Any]:
    """Open transactions, write ``per_txn`` events into each, commit or abort them."""
    m = pc.StreamManager(a["uri"])
    tw = m.create_transaction_writer(a["scope"], a["stream"], 7)
    result = []
    for t, action in enumerate(a["actions"]):
        tx = tw.begin_txn()
        for i in range(a["per_txn"]):
            key = f"k{i % 4}"
            tx.write_event(f"t{t}:{key}:{i}", routing_key=key)
        opened = tx.is_open()
        if a.get("pause"):
            print("PAUSED", flush=True)
            sys.stdin.readline()
        if action == "commit":
            tx.commit()
        elif action == "abort":
            tx.abort()
        result.append({"id": tx.get_txn_id(), "open_before": opened, "open_after": tx.is_open()})
    return {"txns": result}


def byte_stream(a: dict[str, Any]) -> dict[str, Any]:
    m = pc.StreamManager(a["uri"])
    bs = m.create_byte_stream(a["scope"], a["stream"])
    data = bytes(range(256)) * (a["size"] // 256)
    bs.write(data)
    bs.flush()
    tail = bs.current_tail_offset()
    bs.seek(0, 0)
    buf = bytearray()
    deadline = time.monotonic() + 30
    while len(buf) < len(data) and time.monotonic() < deadline:
        chunk = bytearray(len(data) - len(buf))
        got = bs.readinto(chunk)
        buf += chunk[:got]
    bs.truncate(1000)
    head = bs.current_head_offset()
    return {"tail": tail, "read_ok": bytes(buf) == data, "head": head}


def big_event(a: dict[str, Any]) -> dict[str, Any]:
    m = pc.StreamManager(a["uri"])
    w = m.create_writer(a["scope"], a["stream"])
    payload = bytes((i * 7) % 251 for i in range(a["size"]))
    w.write_event_bytes(payload, routing_key="big")
    w.write_event_bytes(b"after", routing_key="big")
    w.flush()
    rg = m.create_reader_group(a["group"], a["scope"], a["stream"])
    reader = rg.create_reader("r")
    got: list[bytes] = []

    async def loop() -> None:
        deadline = time.monotonic() + 60
        while len(got) < 2 and time.monotonic() < deadline:
            piece = await asyncio.wait_for(reader.get_segment_slice_async(), 30)
            got.extend(ev.data() for ev in piece)
            reader.release_segment(piece)

    asyncio.run(loop())
    return {
        "count": len(got),
        "first_ok": bool(got) and got[0] == payload,
        "sizes": [len(g) for g in got],
    }


COMMANDS = {
    "write": write,
    "read": read,
    "admin": admin,
    "txn": txn,
    "byte_stream": byte_stream,
    "big_event": big_event,
}

if __name__ == "__main__":
    result = COMMANDS[sys.argv[1]](json.loads(sys.argv[2]))
    print(json.dumps(result), flush=True)
    # Leave without interpreter teardown: the client's background threads can crash
    # (SIGSEGV) while Python finalizes, after all the work is done and reported.
    os._exit(0)
