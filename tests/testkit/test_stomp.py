"""testkit.stomp against a scripted server: no broker needed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

from testkit.stomp import Closed, ErrorFrame, Stalled, StompClient

CONNECTED = b"CONNECTED\nversion:1.2\n\n\0"
ERROR = b"ERROR\nmessage:no\n\nbecause\0"


@asynccontextmanager
async def server(script: Callable[[asyncio.StreamReader, asyncio.StreamWriter], object]) -> AsyncIterator[int]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\0")  # CONNECT
        await script(reader, writer)

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield srv.sockets[0].getsockname()[1]
    finally:
        srv.close()


async def test_frames_come_in_order_and_an_error_frame_is_returned_by_default():
    async def script(reader, writer):
        writer.write(CONNECTED + b"MESSAGE\na:1\n\none\0MESSAGE\na:2\n\ntwo\0" + ERROR)
        writer.close()

    async with server(script) as port:
        client = await StompClient.connect(port)
        assert client.connected is not None and client.connected.command == "CONNECTED"
        assert [f.body for f in await client.until_closed(5)] == [b"one", b"two", b"because"]
        with pytest.raises(Closed):
            await client.next(1)


async def test_raise_errors_turns_an_error_frame_into_an_exception_carrying_it():
    async def script(reader, writer):
        writer.write(CONNECTED + ERROR)
        await writer.drain()

    async with server(script) as port:
        client = await StompClient.connect(port, raise_errors=True)
        with pytest.raises(ErrorFrame) as caught:
            await client.next(5)
        assert caught.value.frame.headers["message"] == "no"
        await client.close()


async def test_a_refused_connect_raises_closed():
    async def script(reader, writer):
        writer.write(ERROR)
        await writer.drain()

    async with server(script) as port:
        with pytest.raises(Closed, match="expected CONNECTED"):
            await StompClient.connect(port)


async def test_silence_raises_stalled_which_is_a_timeout_and_says_what_it_waited_for():
    async def script(reader, writer):
        writer.write(CONNECTED)
        await reader.read()

    async with server(script) as port:
        client = await StompClient.connect(port, heartbeat=None)
        with pytest.raises(TimeoutError):
            await client.next(0.1)
        with pytest.raises(Stalled, match="RECEIPT r1"):
            await client.expect_receipt("r1", 0.1)
        client.abort()


async def test_batch_returns_every_frame_one_read_completes():
    async def script(reader, writer):
        writer.write(CONNECTED + b"RECEIPT\nreceipt-id:1\n\n\0RECEIPT\nreceipt-id:2\n\n\0")
        await reader.read()

    async with server(script) as port:
        client = await StompClient.connect(port)
        frames = await client.batch(5)
        assert [f.headers["receipt-id"] for f in frames] == ["1", "2"]
        await client.close()
