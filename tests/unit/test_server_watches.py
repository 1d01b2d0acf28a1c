"""A closing bridge ends its watches even when one swallows a cancel (Python 3.11's wait_for
drops a cancel that meets the result it waits for): close() must not wait on forever."""

import asyncio

from stomp_bridge.transport.server import cancel_and_wait


async def test_a_watch_that_swallows_one_cancel_is_cancelled_again_and_ends():
    swallowed = 0

    async def watch() -> None:
        nonlocal swallowed
        while True:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                swallowed += 1
                if swallowed == 1:
                    continue  # as the broker watch went on after wait_for dropped its cancel
                raise

    task = asyncio.create_task(watch())
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_and_wait(task), 5)
    assert task.cancelled() and swallowed == 2
