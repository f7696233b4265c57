"""The blocking facade's event loop: one loop (uvloop when installed) in a daemon thread.

Contract: :meth:`LoopThread.run` hands a coroutine to the loop and waits for it (with an
optional timeout); :meth:`LoopThread.stop` cancels what still runs, stops and closes the
loop, after which every ``run`` raises :class:`ClientClosed` at once instead of handing a
coroutine to a dead loop. Blocking methods cannot be called from the loop's own thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import CancelledError
from concurrent.futures import Future as ConcurrentFuture
from typing import Any, TypeVar

from .errors import ClientClosed, Timeout

T = TypeVar("T")


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


class LoopThread:
    """An event loop running forever in a daemon thread.

    ``stop`` ends it for good: pending tasks are cancelled (their callers get
    :class:`ClientClosed`), the loop stops and closes, and every later ``run`` raises
    :class:`ClientClosed` at once instead of handing a coroutine to a dead loop.
    """

    def __init__(self) -> None:
        self.loop = _new_loop()
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._stopped = False
        self.thread = threading.Thread(
            target=self._main, name="segmentstore-client-loop", daemon=True
        )
        self.thread.start()
        self._ready.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    @property
    def stopped(self) -> bool:
        """True once :meth:`stop` was called."""
        return self._stopped

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (at most ``timeout`` seconds,
        then cancel it and raise :class:`Timeout`)."""
        if threading.get_ident() == self.thread.ident:
            coro.close()
            raise RuntimeError("blocking client methods cannot be called from its own loop")
        with self._lock:  # stop() cannot slip in between the check and the hand-over
            if self._stopped:
                coro.close()
                raise ClientClosed("the client is closed")
            fut: ConcurrentFuture[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except TimeoutError:
            if not fut.done():
                fut.cancel()
                raise Timeout(f"no result within {timeout:g}s") from None
            raise
        except CancelledError:
            raise ClientClosed("the client is closed") from None

    def stop(self) -> None:
        """Cancel what still runs on the loop, stop it and wait for its thread."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        if self.loop.is_running():
            asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop)
        if threading.get_ident() != self.thread.ident:
            self.thread.join(10)

    async def _shutdown(self) -> None:
        me = asyncio.current_task()
        for _ in range(10):  # a cancelled task may start another; bounded
            tasks = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
            if not tasks:
                break
            for t in tasks:
                t.cancel()
            await asyncio.wait(tasks, timeout=1.0)
        self.loop.stop()
