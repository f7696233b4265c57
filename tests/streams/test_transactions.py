"""Stream transactions through the SDK: commit makes every event visible, abort none."""

from __future__ import annotations

import segmentstore_client as sc

from .helpers import per_key, read_stream


async def test_commit_and_abort(client: sc.Client) -> None:
    await client.create_scope("t")
    await client.create_stream("t/s", 3)
    async with client.stream_writer("t/s") as w:
        await (await w.write(b"k0:0", routing_key="k0"))
        txn = await w.begin()
        for n in range(1, 21):
            for k in ("k0", "k1", "k2"):
                await txn.write(f"{k}:{n}".encode(), routing_key=k)
        assert per_key(await read_stream(client, "t/s")) == {"k0": [0]}  # nothing visible
        assert await txn.check_state() == "OPEN"
        await txn.commit()
        assert await txn.check_state() in ("COMMITTING", "COMMITTED")
        dropped = await w.begin()
        await dropped.write(b"k0:99", routing_key="k0")
        await dropped.abort()
        await (await w.write(b"k0:21", routing_key="k0"))
    seen = per_key(await read_stream(client, "t/s"))
    assert seen == {"k0": list(range(22)), "k1": list(range(1, 21)), "k2": list(range(1, 21))}
