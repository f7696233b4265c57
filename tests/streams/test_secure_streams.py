"""Streams over TLS with auth on the wire port and the controller (issue 20): admin, a
stream writer and a reader group with a user's credentials; a READ-only user cannot write
(one clear error); delegation tokens that expire every 2 s are renewed by writers (at
SetupAppend, e.g. after a scale) and by a follow reader (at ReadSegment) without losing or
duplicating an event."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import segmentstore_client as sc
from client.chaos_proxy import ChaosProxy  # tests/client
from security.test_secure_setup import Secure, _secure_server  # tests/security
from segmentstore_client.errors import AuthenticationFailed

from .helpers import per_key, read_stream, scale_steps

KEYS = 24


@pytest.fixture
def short_tokens(tmp_path: Path) -> Iterator[Secure]:
    s = _secure_server(tmp_path, ttl="2")
    yield s
    s.server.kill()


async def test_writer_and_follow_reader_outlive_several_tokens(short_tokens: Secure) -> None:
    s = short_tokens
    async with s.connect(("alice", "alice-pw")) as c:
        assert c.options.controller.startswith("tls://")
        await c.create_scope("app")
        await c.create_stream("app/s", 2)
        tokens = {c.options.delegation_token}
        group = await c.reader_group("app/g", ["app/s"], sync_interval=0.2)
        reader = group.reader("r1")
        got: list[str] = []
        rounds = 0

        async def follow() -> None:
            async for ev in reader.events():  # ends after close()
                got.append(ev.data.decode())

        async def write() -> None:
            nonlocal rounds
            async with c.stream_writer("app/s", "w1") as w:
                start, n = time.monotonic(), 0
                while time.monotonic() - start < 7 or n < 10:  # three and more tokens
                    await w.write_many(
                        [f"k{i}:{n}".encode() for i in range(KEYS)],
                        routing_keys=[f"k{i}" for i in range(KEYS)],
                    )
                    n += 1
                    tokens.add(c.options.delegation_token)
                    await asyncio.sleep(0.05)
            rounds = n

        following = asyncio.create_task(follow())
        # scales at 2.5 s and 5 s: new segment writers set up with an expired token
        await asyncio.gather(write(), scale_steps(c, "app/s", [3, 2], 2.5))
        deadline = time.monotonic() + 60
        while len(got) < rounds * KEYS and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        await reader.close()
        await asyncio.wait_for(following, 10)
        assert len(tokens) >= 3, "the tokens were renewed"
        want = {f"k{i}": list(range(rounds)) for i in range(KEYS)}
        assert per_key({0: got}) == want  # the follow reader: each once, per-key order
        assert per_key(await read_stream(c, "app/s")) == want
        assert await group.delete()


async def test_read_only_user_cannot_write_a_stream(short_tokens: Secure) -> None:
    s = short_tokens
    async with s.connect(("alice", "alice-pw")) as c:
        await c.create_scope("app")
        await c.create_stream("app/ro", 1)
        async with c.stream_writer("app/ro") as w:
            await (await w.write(b"k:0", routing_key="k"))
    async with s.connect(("reader", "reader-pw")) as r:
        info = await r.stream_info("app/ro")  # reading is allowed
        assert sum(x.events for x in info.segments.values()) == 1
        with pytest.raises(AuthenticationFailed) as refused:
            async with r.stream_writer("app/ro") as w:
                await (await w.write(b"k:1", routing_key="k"))
        assert "\n" not in str(refused.value) and "READ" in str(refused.value)
        assert [e.data async for e in r.reader(info.segments[min(info.segments)].name)] == [b"k:0"]


async def test_segment_writer_and_reader_renew_their_tokens(short_tokens: Secure) -> None:
    """The writer meets an expired token at its SetupAppend after a lost connection, the
    follow reader at a ReadSegment; each client does nothing else that could renew it."""
    s = short_tokens
    async with ChaosProxy("127.0.0.1", s.server.port, max_cuts=0) as proxy:

        def connect() -> sc.Client:
            return sc.connect(
                f"tls://127.0.0.1:{proxy.port}",
                credentials=("alice", "alice-pw"),
                controller=s.controller,
                tls_ca_file=s.pki.ca_pem,
            )

        async with connect() as wc, connect() as rc:
            await wc.create_segment("app/seg/0")
            w = await wc.writer("app/seg/0").start()
            first = (wc.options.delegation_token, rc.options.delegation_token)
            reader = rc.reader("app/seg/0", follow=True)
            got: list[bytes] = []

            async def follow() -> None:
                async for ev in reader:
                    got.append(ev.data)

            task = asyncio.create_task(follow())
            n, start, cut = 0, time.monotonic(), False
            while time.monotonic() - start < 5:
                await w.write_many([str(n + i).encode() for i in range(50)])
                n += 50
                if not cut and time.monotonic() - start > 2.8:  # the token expired at 2 s
                    proxy.cut_all()
                    cut = True
                await asyncio.sleep(0.05)
            await w.flush(timeout=30)
            deadline = time.monotonic() + 30
            while len(got) < n and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            task.cancel()
            assert got == [str(i).encode() for i in range(n)]  # none lost, none twice
            assert wc.options.delegation_token != first[0]  # renewed by the writer
            assert rc.options.delegation_token != first[1]  # renewed by the reader
            await w.close()
