"""What internals.py uses of aiormq and pamqp is still there, with the shape it was written for.

Each check names the internal and what to do, so an upgrade of aiormq or pamqp fails here,
loudly, instead of as a lost delivery or an "inequivalent arg" refusal in production.
"""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import sys

import aiormq
import aiormq.abc
import aiormq.channel
import aiormq.connection
import pamqp.encode
import pytest

from stomp_bridge.amqp import internals

UPGRADE = (
    "stomp_bridge/amqp/internals.py was written against aiormq {aiormq} and pamqp {pamqp}; "
    "check every internal it uses against the installed versions, then widen its *_VERSIONS"
)


def _why(what: str) -> str:
    return f"{what}. " + UPGRADE.format(aiormq=internals.AIORMQ_VERSIONS, pamqp=internals.PAMQP_VERSIONS)


def _params(function: object) -> list[str]:
    return list(inspect.signature(function).parameters)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("package", "versions"),
    [("aiormq", internals.AIORMQ_VERSIONS), ("pamqp", internals.PAMQP_VERSIONS)],
)
def test_installed_version_is_in_the_tested_range(package: str, versions: tuple) -> None:
    low, high = versions
    installed = internals.version_of(package)
    assert low <= installed < high, _why(f"{package} {installed} is outside the tested range {low}..{high}")


def test_version_of_reads_numbers_before_any_suffix() -> None:
    assert internals.version_of("aiormq")[:1] == (internals.AIORMQ_VERSIONS[0][0],)


def test_frame_receiver_the_bulk_reader_subclasses() -> None:
    receiver = internals.FrameReceiver
    assert receiver is aiormq.connection.FrameReceiver or issubclass(
        aiormq.connection.FrameReceiver, receiver
    ), _why("aiormq.connection.FrameReceiver is not the class internals captured")
    assert _params(receiver.__init__) == ["self", "reader"], _why("FrameReceiver(reader) changed")
    assert inspect.iscoroutinefunction(receiver.get_frame), _why("FrameReceiver.get_frame is no longer async")
    source = inspect.getsource(aiormq.connection)
    # aiormq instantiates the module-level name at connect time: the installation point.
    assert "FrameReceiver(" in source, _why("aiormq no longer instantiates connection.FrameReceiver")

    async def missing() -> list[str]:  # inside a loop: FrameReceiver.loop is the running one
        instance = receiver(asyncio.StreamReader())
        return [name for name in ("reader", "loop", "started") if not hasattr(instance, name)]

    assert asyncio.run(missing()) == [], _why("FrameReceiver lost an attribute the bulk reader uses")


def test_stream_reader_keeps_its_transport() -> None:
    loop = asyncio.new_event_loop()
    try:
        reader = asyncio.StreamReader(loop=loop)
        marker = object()
        reader.set_transport(marker)  # type: ignore[arg-type]
        assert internals.stream_transport(reader) is marker, _why("StreamReader._transport is gone")
    finally:
        loop.close()


def test_connection_write_queue_and_channel_frame() -> None:
    async def make() -> aiormq.Connection:
        return aiormq.Connection("amqp://guest:guest@127.0.0.1:1/")

    loop = asyncio.new_event_loop()
    try:
        connection = loop.run_until_complete(make())
        queue = internals.write_queue(connection)
        assert isinstance(queue, asyncio.Queue) and queue.maxsize > 0, _why(
            "aiormq Connection.write_queue is no longer a bounded asyncio.Queue (the backpressure)"
        )
        unblocked = internals.unblocked(connection)
        assert isinstance(unblocked, asyncio.Event), _why(
            "aiormq Connection.__connection_unblocked (clear between connection.blocked and "
            "unblocked) is gone or no longer an asyncio.Event"
        )
    finally:
        loop.close()
    frame = internals.channel_frame(b"payload")
    assert (frame.payload, frame.should_close, frame.drain_future) == (b"payload", False, None), _why(
        "aiormq.abc.ChannelFrame(payload, should_close, drain_future) changed"
    )


def test_client_properties_uses_aiormqs_platform_and_version() -> None:
    props = internals.client_properties("me")
    assert props["connection_name"] == "me"
    assert props["version"] == aiormq.connection.__version__, _why("aiormq.connection.__version__ is gone")
    assert props["platform"] == aiormq.connection.PLATFORM, _why("aiormq.connection.PLATFORM is gone")


def test_pamqp_table_integer_is_the_encoding_point() -> None:
    assert _params(pamqp.encode.table_integer) == ["value"], _why("pamqp.encode.table_integer(value) changed")
    source = inspect.getsource(pamqp.encode)
    # pamqp must look the name up at call time, or replacing it has no effect.
    assert "table_integer(" in source, _why("pamqp's field-table encoder no longer calls table_integer")
    assert internals.table_integer_as_long(10) == b"l" + (10).to_bytes(8, "big", signed=True)
    with pytest.raises(TypeError):
        internals.table_integer_as_long(1 << 63)


# -- nothing at import, everything once a bridge starts ------------------------------------------

_CHECK_IMPORT = r'''
import importlib, pkgutil, sys
import aiormq.connection, pamqp.encode
stock_integer, stock_receiver = pamqp.encode.table_integer, aiormq.connection.FrameReceiver
import stomp_bridge
skip = {"stomp_bridge.spark", "stomp_bridge.containers", "stomp_bridge.__main__"}
imported = []
for info in pkgutil.walk_packages(stomp_bridge.__path__, "stomp_bridge."):
    if any(info.name == s or info.name.startswith(s + ".") for s in skip):
        continue
    importlib.import_module(info.name)
    imported.append(info.name)
assert "stomp_bridge.amqp.channel" in imported and "stomp_bridge.transport.server" in imported, imported
assert pamqp.encode.table_integer is stock_integer, "importing stomp_bridge replaced pamqp.encode.table_integer"
assert aiormq.connection.FrameReceiver is stock_receiver, "importing stomp_bridge replaced aiormq's FrameReceiver"
print("untouched", len(imported))
'''

_CHECK_START = r'''
import asyncio
import pamqp.frame
from pamqp import commands as spec
from stomp_bridge.settings import Settings
from stomp_bridge.transport.server import BridgeServer
from stomp_bridge.amqp import internals

def declared() -> bytes:
    return pamqp.frame.marshal(spec.Queue.Declare(queue="q", arguments={"x-max-length": 10}), 1)

assert b"x-max-lengthb\n" in declared(), "pamqp's own encoding (a byte) before the bridge starts"

async def main() -> None:
    server = BridgeServer(Settings(amqp_url="amqp://guest:guest@127.0.0.1:1/", host="127.0.0.1", port=0,
                                   http_port=None, ws_port=None))
    await server.start()
    try:
        assert internals.installed(), "BridgeServer.start did not install the bridge's AMQP behaviour"
        assert b"x-max-lengthl" + (10).to_bytes(8, "big") in declared(), declared()
    finally:
        await server.close()

asyncio.run(main())
print("long")
'''


def _run(code: str) -> str:
    """A fresh interpreter: this process's pamqp may already be installed by another test."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_importing_stomp_bridge_leaves_aiormq_and_pamqp_untouched() -> None:
    assert _run(_CHECK_IMPORT).startswith("untouched")


def test_after_the_bridge_starts_a_queue_argument_is_encoded_as_a_long() -> None:
    assert _run(_CHECK_START).strip() == "long"


def test_install_is_idempotent() -> None:
    """BridgeServer.start installs every time a bridge starts in the process (tests start many)."""
    from stomp_bridge.amqp.connect import install
    from stomp_bridge.amqp.reader import BulkFrameReceiver

    install()
    install()
    assert aiormq.connection.FrameReceiver is BulkFrameReceiver
    assert pamqp.encode.table_integer is internals.table_integer_as_long
    assert internals.installed()


def test_install_refuses_a_receiver_that_is_not_aiormqs_subclass_naming_the_aiormq_needed() -> None:
    class Unrelated:
        pass

    before = aiormq.connection.FrameReceiver
    with pytest.raises(internals.UnsupportedAiormq) as refused:
        internals.install(Unrelated)
    assert aiormq.connection.FrameReceiver is before
    text = str(refused.value)
    assert "FrameReceiver" in text and "aiormq>=7.2,<8.0" in text and "pip install 'aiormq>=7.2,<8.0'" in text, text


def test_install_refuses_an_aiormq_whose_frame_receiver_moved(monkeypatch: pytest.MonkeyPatch) -> None:
    """An aiormq that no longer reads frames with connection.FrameReceiver (the class the bridge's
    reader extends): the bridge must not start, and nothing is half-installed."""
    from stomp_bridge.amqp.reader import BulkFrameReceiver

    class Moved:
        pass

    monkeypatch.setattr(aiormq.connection, "FrameReceiver", Moved)
    stock = pamqp.encode.table_integer
    monkeypatch.setattr(pamqp.encode, "table_integer", stock)
    monkeypatch.setattr(internals, "_receiver", None)
    with pytest.raises(internals.UnsupportedAiormq, match="cannot read AMQP with aiormq"):
        internals.install(BulkFrameReceiver)
    assert aiormq.connection.FrameReceiver is Moved and pamqp.encode.table_integer is stock
    assert not internals.installed()
    with pytest.raises(RuntimeError, match="reader is not installed"):
        internals.require_installed()


def test_channel_error_is_the_exception_aiormq_raises_for_a_channel_close() -> None:
    from pamqp import commands as spec

    assert hasattr(aiormq.channel, "exception_by_code"), _why("aiormq.channel.exception_by_code is gone")
    error = internals.channel_error(spec.Channel.Close(reply_code=404, reply_text="NOT_FOUND - no queue 'q'"))
    assert isinstance(error, aiormq.exceptions.ChannelNotFoundEntity), _why("exception_by_code maps 404 otherwise")
    assert "NOT_FOUND - no queue 'q'" in repr(error.args)


_CHECK_REFUSAL = r'''
import aiormq.connection
aiormq.connection.FrameReceiver = type("FrameReceiver", (), {})  # an aiormq whose reader moved
from stomp_bridge.cli import main
raise SystemExit(main(["--port", "0", "--http-port", "0", "--amqp-url", "amqp://guest:guest@127.0.0.1:1/"]))
'''


def test_the_bridge_refuses_to_start_on_an_aiormq_it_cannot_read_with() -> None:
    """No silent fallback: the command exits, saying which aiormq it needs."""
    done = subprocess.run([sys.executable, "-c", _CHECK_REFUSAL], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, (done.returncode, done.stderr)
    assert "stomp-bridge: cannot read AMQP with aiormq" in done.stderr, done.stderr
    assert "stomp-bridge needs aiormq>=7.2,<8.0 and pamqp>=4.0,<5.0" in done.stderr, done.stderr


def test_a_stream_reader_can_be_diverted() -> None:
    """divert_stream: the bytes buffered before are returned, later ones go to the callback, and
    the reader still records its end (asyncio's protocol calls feed_eof on the instance)."""
    async def check() -> None:
        reader = asyncio.StreamReader()
        protocol = asyncio.StreamReaderProtocol(reader)
        protocol.data_received(b"before")
        got: list = []
        assert internals.divert_stream(reader, got.append, lambda: got.append("end")) == b"before"
        protocol.data_received(b"after")
        protocol.eof_received()
        assert got == [b"after", "end"], _why("StreamReaderProtocol no longer calls reader.feed_data/feed_eof")
        assert reader.at_eof()

    asyncio.run(check())
