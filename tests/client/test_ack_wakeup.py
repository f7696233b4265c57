"""Issue 19, round 5: an awaited :class:`Ack` resumes its task one loop turn after the
batch's future is settled (``AckFuture`` settles each await's own waiter in the same call;
``asyncio.shield`` took a second turn), and cancelling one awaiting task still never
cancels the shared ack."""

from __future__ import annotations

import asyncio

import pytest
import segmentstore_client as sc
from segmentstore_client.errors import ConnectionLost
from segmentstore_client.writer_blocks import Ack, AckFuture


async def turns_until_done(task: asyncio.Future[None], fut: AckFuture) -> int:
    """Count the loop turns (one sleep(0) each) until ``task`` is done."""
    for turn in range(1, 10):
        await asyncio.sleep(0)
        if task.done():
            return turn
    raise AssertionError("the awaiting task did not resume within 9 turns")


async def test_an_awaiting_task_resumes_one_turn_after_the_ack() -> None:
    fut = AckFuture(loop=asyncio.get_running_loop())
    ack = Ack(fut)
    task = asyncio.ensure_future(_await(ack))
    await asyncio.sleep(0)  # the task is waiting
    fut.set_result(None)
    assert await turns_until_done(task, fut) == 1
    assert task.result() is None


async def _await(ack: Ack) -> None:
    await ack


async def test_cancelling_one_waiter_leaves_the_ack_and_the_others() -> None:
    fut = AckFuture(loop=asyncio.get_running_loop())
    ack = Ack(fut)
    first = asyncio.ensure_future(_await(ack))
    second = asyncio.ensure_future(_await(ack))
    await asyncio.sleep(0)
    first.cancel()
    await asyncio.sleep(0)
    assert first.cancelled()
    assert not fut.done()  # the shared ack is not cancelled
    fut.set_result(None)
    assert await turns_until_done(second, fut) == 1
    assert second.result() is None
    assert await asyncio.wait_for(_await(ack), 1) is None  # done already: no wait


async def test_an_error_reaches_every_waiter_and_is_retrieved() -> None:
    fut = AckFuture(loop=asyncio.get_running_loop())
    ack = Ack(fut)
    waiters = [asyncio.ensure_future(_await(ack)) for _ in range(3)]
    await asyncio.sleep(0)
    fut.set_exception(ConnectionLost("gone"))
    await asyncio.sleep(0)
    for w in waiters:
        with pytest.raises(ConnectionLost):
            w.result()
    assert isinstance(ack.exception(), ConnectionLost)


async def test_a_cancelled_batch_cancels_its_waiters() -> None:
    fut = AckFuture(loop=asyncio.get_running_loop())
    waiter = asyncio.ensure_future(_await(Ack(fut)))
    await asyncio.sleep(0)
    fut.cancel()
    await asyncio.sleep(0)
    assert waiter.cancelled()


async def test_a_real_writer_acks_through_one_turn_futures(client: sc.Client, segment: str) -> None:
    await client.create_segment(segment)
    async with client.writer(segment) as w:
        ack = await w.write(b"x" * 100)
        assert type(ack._fut) is AckFuture
        await asyncio.wait_for(ack, 10)
        acks = [await w.write(b"y") for _ in range(10)]
        await asyncio.wait_for(asyncio.gather(*acks), 10)
        assert (await client.segment_info(segment)).length == 100 + 8 + 10 * (1 + 8)
