"""A fault-injecting TCP proxy (asyncio) for client tests, in the spirit of asyncpg's.

It forwards bytes between clients and one upstream server and, a bounded number of
times, cuts a connection in the middle of the stream: after a random number of bytes
(drawn per connection), it forwards only part of the chunk at hand, so the server sees a
torn frame, and then aborts both sides (RST). After ``max_cuts`` cuts it only forwards.

Run it by hand: ``python tests/client/chaos_proxy.py UPSTREAM_PORT [--cuts N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random


class ChaosProxy:
    def __init__(
        self,
        upstream_host: str,
        upstream_port: int,
        *,
        max_cuts: int = 10,
        cut_after: tuple[int, int] = (100_000, 2_000_000),
        seed: int | None = None,
    ) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.max_cuts = max_cuts
        self.cut_after = cut_after
        self.cuts = 0
        self.connections = 0
        self._rng = random.Random(seed)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    async def start(self) -> ChaosProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self.cut_all()  # the pumps see their connections end and return
        if self._tasks:
            _, pending = await asyncio.wait(list(self._tasks), timeout=5)
            for t in pending:
                t.cancel()
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> ChaosProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def cut_all(self) -> None:
        """Abort every proxied connection now (does not count against ``max_cuts``)."""
        for w in list(self._writers):
            w.transport.abort()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()
            self._tasks.discard(task)
            return
        pair = (writer, up_writer)
        self._writers.update(pair)
        budget = [self._rng.randint(*self.cut_after)]
        try:
            await asyncio.gather(
                self._pump(reader, up_writer, budget, pair),
                self._pump(up_reader, writer, budget, pair),
            )
        except (ConnectionError, OSError):
            pass
        finally:
            for w in pair:
                w.transport.abort()
                self._writers.discard(w)
            self._tasks.discard(task)

    async def _pump(
        self,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
        budget: list[int],
        pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter],
    ) -> None:
        while True:
            data = await src.read(65536)
            if not data:
                with contextlib.suppress(OSError):
                    dst.write_eof()
                return
            if self.cuts < self.max_cuts and len(data) >= budget[0]:
                # Forward a torn piece of this chunk, then cut both sides.
                self.cuts += 1
                dst.write(data[: self._rng.randint(0, max(0, budget[0] - 1))])
                for w in pair:
                    w.transport.abort()
                return
            budget[0] -= len(data)
            dst.write(data)
            await dst.drain()


async def _main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("upstream_port", type=int)
    parser.add_argument("--upstream-host", default="127.0.0.1")
    parser.add_argument("--cuts", type=int, default=10)
    args = parser.parse_args()
    proxy = await ChaosProxy(args.upstream_host, args.upstream_port, max_cuts=args.cuts).start()
    print(f"proxy listening on {proxy.endpoint}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(_main())
