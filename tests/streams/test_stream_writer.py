"""StreamWriter against a real server and controller: routing as the official client
does, exactly once and in key order across manual scaling."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import segmentstore_client as sc
from controller.conftest import Ctl, controller_uri, run_driver

from .helpers import per_key, read_stream, scale_steps, write_rounds


async def test_same_keys_from_official_client_and_sdk_share_segments(
    ctl: Ctl, client: sc.Client, tmp_path: Path
) -> None:
    keys, first = 40, 5
    await client.create_scope("m")
    await client.create_stream("m/s", 4)
    run_driver(
        "write",
        uri=controller_uri(ctl.server),
        scope="m",
        stream="s",
        count=keys * first,
        keys=keys,
    )
    async with client.stream_writer("m/s") as w:
        for n in range(first, 2 * first):
            await w.write_many(
                [f"k{i}:{n}".encode() for i in range(keys)],
                routing_keys=[f"k{i}" for i in range(keys)],
            )
    events = await read_stream(client, "m/s")
    where = {line.rpartition(":")[0]: sid for sid, lines in events.items() for line in lines}
    for sid, lines in events.items():
        assert all(where[line.rpartition(":")[0]] == sid for line in lines)  # one segment a key
    assert per_key(events) == {f"k{i}": list(range(2 * first)) for i in range(keys)}
    # and the official reader sees each key in order, too
    out = tmp_path / "official.txt"
    got = run_driver(
        "read",
        uri=controller_uri(ctl.server),
        scope="m",
        stream="s",
        group="g1",
        count=keys * 2 * first,
        out_file=str(out),
        seconds=60,
    )
    assert got["read"] == keys * 2 * first
    seen: dict[str, list[int]] = {}
    for line in out.read_text().splitlines():
        k, _, n = line.rpartition(":")
        seen.setdefault(k, []).append(int(n))
    assert seen == {f"k{i}": list(range(2 * first)) for i in range(keys)}


async def test_keyless_events_spread_over_segments(client: sc.Client) -> None:
    await client.create_scope("u")
    await client.create_stream("u/s", 4)
    async with client.stream_writer("u/s") as w:
        await (await w.write_many([b"x:%d" % i for i in range(4000)]))
    counts = [len(v) for v in (await read_stream(client, "u/s")).values()]
    assert sum(counts) == 4000 and min(counts) > 800  # ~1000 each


@pytest.mark.parametrize("plan", [[5, 2], [1, 3, 1]])
async def test_scaling_while_writing_keeps_every_event_once_in_key_order(
    client: sc.Client, plan: list[int]
) -> None:
    await client.create_scope("sc")
    await client.create_stream("sc/s", 2)
    keys, rounds = 30, 60
    w = client.stream_writer("sc/s", "scaler-test", linger=0.001)

    await asyncio.gather(
        write_rounds(w, keys, rounds, 0.01), scale_steps(client, "sc/s", plan, 0.15)
    )
    await w.close()
    info = await client.stream_info("sc/s")
    assert len(info.epochs) == 1 + len(plan)
    events = await read_stream(client, "sc/s")
    assert per_key(events) == {f"k{i}": list(range(rounds)) for i in range(keys)}
    for epoch in info.epochs:  # the writes spanned every scale
        assert any(events.get(r.segment) for r in epoch)


async def test_await_ack_follows_a_scale(client: sc.Client) -> None:
    await client.create_scope("a")
    await client.create_stream("a/s", 1)
    w = await client.stream_writer("a/s").start()
    await (await w.write(b"k:0", routing_key="k"))
    await client.scale_stream("a/s", 2)
    ack = await w.write(b"k:1", routing_key="k")  # sent to the sealed segment
    await ack  # resolves once resent to the successor
    await w.flush()
    await w.close()
    assert per_key(await read_stream(client, "a/s")) == {"k": [0, 1]}


async def test_sealed_stream_fails_writes_clearly(client: sc.Client) -> None:
    await client.create_scope("z")
    await client.create_stream("z/s", 2)
    w = await client.stream_writer("z/s").start()
    await (await w.write(b"k:0", routing_key="k"))
    await client.seal_stream("z/s")
    with pytest.raises(sc.SegmentSealed):
        await (await w.write(b"k:1", routing_key="k"))
    with pytest.raises(sc.SegmentSealed):
        await w.write(b"k:2", routing_key="k")
    w.abort()
    with pytest.raises(sc.SegmentSealed):
        await client.stream_writer("z/s").start()
    with pytest.raises(ValueError, match="routing keys"):
        await client.stream_writer("z/s").write_many([b"a"], routing_keys=["a", "b"])
