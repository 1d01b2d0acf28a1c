"""A logged-in client's frames are handled in the socket's data_received (TcpLink.on_data): a
SEND's publish reaches RabbitMQ's socket with no pass of the event loop between its bytes'
arrival and the write, and a frame that needs the loop (a job) still runs there, in order."""

from __future__ import annotations

import asyncio
import contextlib

from pamqp import commands as spec

from stomp_bridge.core.rules import Rules
from stomp_bridge.metrics import Counters
from stomp_bridge.settings import Settings
from stomp_bridge.transport.connection import Connection, TcpLink

from .fake_rabbit import Rabbits
from .test_links import FakeTransport


async def _until(condition, passes: int = 200) -> None:
    for _ in range(passes):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("never happened")


@contextlib.asynccontextmanager
async def _logged_in():
    """A connection over a fake socket and a fake RabbitMQ, past CONNECTED: (link, client, rabbit)."""
    rabbits = Rabbits()
    settings = Settings(amqp_url="amqp://guest:guest@127.0.0.1:1/")
    link = TcpLink(lambda _: None, high=1 << 20)
    client = FakeTransport()
    link.connection_made(client)
    connection = Connection(link, settings, Rules.of(settings), Counters(), rabbits.pool(separate_publishers=False),
                            peer=("127.0.0.1", 40000))
    task = asyncio.ensure_future(connection.run())
    try:
        link.data_received(b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\0")
        await _until(lambda: any(w.startswith(b"CONNECTED") for w in client.written))
        yield link, client, rabbits.made[-1]
    finally:
        link.connection_lost(None)  # the client goes: the loop ends
        await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 10)


async def test_a_send_arriving_while_the_loop_waits_is_published_before_the_loop_runs_again():
    async with _logged_in() as (link, client, rabbit):
        link.data_received(b"SEND\ndestination:/queue/q\nreceipt:r1\n\nbody\0")  # a receipt's job: the loop
        await _until(lambda: any(isinstance(f, spec.Basic.Publish) for f in rabbit.methods()))
        await _until(lambda: link._waiter is not None)  # the loop waits for bytes again
        link.data_received(b"SEND\ndestination:/queue/q\n\nfast\0")
        assert [type(f) for f in rabbit.methods()] == [spec.Basic.Publish]  # now, in this callback


async def test_a_large_chunk_goes_through_the_loop_and_its_frame_is_still_published():
    """A chunk of SMALL_CHUNK bytes or more (a large body's) is left to the loop, which takes the
    chunks that gather meanwhile together; the frame it completes is published all the same."""
    from stomp_bridge.transport.connection import SMALL_CHUNK

    async with _logged_in() as (link, client, rabbit):
        await _until(lambda: link._waiter is not None)
        body = b"x" * (2 * SMALL_CHUNK)
        frame = b"SEND\ndestination:/queue/q\ncontent-length:%d\n\n%s\0" % (len(body), body)
        link.data_received(frame[:SMALL_CHUNK])
        assert not link._chunks and link.filled == SMALL_CHUNK  # into the parser now, its frames left to the loop
        link.data_received(frame[SMALL_CHUNK:])
        await _until(lambda: any(isinstance(f, spec.Basic.Publish) for f in rabbit.methods()))
