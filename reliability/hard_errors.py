"""Which AMQP mistakes RabbitMQ answers with a connection error: each tried on a real broker.

``python -m reliability.hard_errors [--broker 4.3|4.0|system|4.4] [--only NAME,...]``

Every case opens its own AMQP connection (aiormq, the client the bridge uses) in a throwaway
vhost with a classic queue, a quorum queue and a stream already holding messages, sends one
sequence of AMQP methods the bridge could send on a client's behalf, then asks the channel a
harmless question (a passive declare). It reports what RabbitMQ did: ``ok``, ``channel`` (a
channel.close: only that channel, so only one STOMP session, ends) or ``connection`` (a
connection.close: every session sharing the connection ends), with the reply code and text.
SECURITY.md says which of these a STOMP frame can reach.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import uuid
from datetime import datetime, timezone
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiormq
import aiormq.exceptions as amqp_exc
from pamqp import commands as spec

from reliability.brokers import BrokerInfo, broker_info
from testkit.management import Management

Step = Callable[["Probe"], Awaitable[None]]


@dataclass
class Outcome:
    kind: str  # ok | channel | connection | client (aiormq refused to send it)
    code: int | None = None
    text: str = ""

    def __str__(self) -> str:
        if self.kind == "ok":
            return "ok"
        return f"{self.kind} {self.code or ''} {self.text}".strip()


class Probe:
    """One case's connection and channel, and the queues made for the run."""

    def __init__(self, url: str, names: dict[str, str]) -> None:
        self.url = url
        self.names = names
        self.connection: aiormq.Connection | None = None
        self.channel: aiormq.Channel | None = None
        self.deliveries: list[aiormq.abc.DeliveredMessage] = []
        self.got_delivery = asyncio.Event()

    async def open(self) -> None:
        self.connection = await aiormq.connect(self.url)
        self.channel = await self.connection.channel(publisher_confirms=False)

    async def on_message(self, message: aiormq.abc.DeliveredMessage) -> None:
        self.deliveries.append(message)
        self.got_delivery.set()

    async def consume(self, queue: str, *, no_ack: bool = False, prefetch: int | None = 10,
                      arguments: dict | None = None, tag: str | None = None, wait: bool = True,
                      exclusive: bool = False) -> None:
        ch = self.channel
        assert ch is not None
        if prefetch is not None:
            await ch.basic_qos(prefetch_count=prefetch)
        await ch.basic_consume(queue, self.on_message, no_ack=no_ack, arguments=arguments,
                               consumer_tag=tag or f"t{uuid.uuid4().hex[:6]}", exclusive=exclusive)
        if wait:
            await asyncio.wait_for(self.got_delivery.wait(), 10)

    async def close(self) -> None:
        if self.connection is not None and not self.connection.is_closed:
            try:
                await asyncio.wait_for(self.connection.close(), 5)
            except Exception:  # noqa: BLE001 - closed by the broker meanwhile
                pass


def _code_text(exc: BaseException) -> tuple[int | None, str]:
    code, text = None, ""
    for arg in exc.args:
        if isinstance(arg, int) and code is None:
            code = arg
        elif isinstance(arg, str) and not text:
            text = arg
        elif hasattr(arg, "reply_code"):
            code, text = arg.reply_code, arg.reply_text
    if code is None:
        code = getattr(exc, "code", None)
    return code, text


_CODES = {"NOT_ALLOWED": 530, "NOT_IMPLEMENTED": 540, "INTERNAL_ERROR": 541, "FRAME_ERROR": 501,
          "SYNTAX_ERROR": 502, "COMMAND_INVALID": 503, "CHANNEL_ERROR": 504, "UNEXPECTED_FRAME": 505,
          "RESOURCE_ERROR": 506, "CONNECTION_FORCED": 320, "PRECONDITION_FAILED": 406, "NOT_FOUND": 404,
          "ACCESS_REFUSED": 403, "RESOURCE_LOCKED": 405}


def _from_text(text: str) -> int | None:
    return _CODES.get(text.split(" - ", 1)[0].strip())


async def run_case(url: str, names: dict[str, str], step: Step) -> Outcome:
    probe = Probe(url, names)
    await probe.open()
    assert probe.connection is not None and probe.channel is not None
    connection, channel = probe.connection, probe.channel
    error: BaseException | None = None
    try:
        await asyncio.wait_for(step(probe), 15)
        # a harmless round trip: an asynchronous refusal (ack, nack, publish) has arrived by its answer
        await asyncio.wait_for(channel.queue_declare(names["classic"], passive=True), 10)
    except (ValueError, TypeError) as exc:  # pamqp would not encode it
        await probe.close()
        return Outcome("client", None, f"{type(exc).__name__}: {exc}"[:200])
    except BaseException as exc:  # noqa: BLE001 - every refusal is an answer here
        error = exc
    await asyncio.sleep(0.3)  # a connection.close that follows a channel error
    outcome = Outcome("ok")
    if connection.is_closed:
        exc = connection.closing.exception() if connection.closing.done() and not connection.closing.cancelled() else error
        code, text = _code_text(exc) if exc is not None else (None, "")
        outcome = Outcome("connection", code or _from_text(text), text)
    elif error is not None:
        code, text = _code_text(error)
        kind = "channel" if channel.is_closed else "error"
        outcome = Outcome(kind, code or _from_text(text), text or repr(error)[:200])
    await probe.close()
    return outcome


# -- the cases: (name, what the bridge sends it for, step) ----------------------------------

async def _nack_stream(p: Probe) -> None:
    await p.consume(p.names["stream"], arguments={"x-stream-offset": "first"})
    await p.channel.basic_nack(p.deliveries[0].delivery_tag)


async def _reject_stream(p: Probe) -> None:
    await p.consume(p.names["stream"], arguments={"x-stream-offset": "first"})
    await p.channel.basic_reject(p.deliveries[0].delivery_tag, requeue=False)


async def _ack_stream(p: Probe) -> None:
    await p.consume(p.names["stream"], arguments={"x-stream-offset": "first"})
    await p.channel.basic_ack(p.deliveries[0].delivery_tag)


def _consume(queue: str, **kw) -> Step:
    async def step(p: Probe) -> None:
        await p.consume(p.names[queue], **{"wait": False, **kw})
    return step


def _get(queue: str) -> Step:
    async def step(p: Probe) -> None:
        await p.channel.basic_get(p.names[queue], no_ack=False)
    return step


def _global_qos_consume(queue: str) -> Step:
    async def step(p: Probe) -> None:
        await p.channel.basic_qos(prefetch_count=10, global_=True)
        await p.consume(p.names[queue], prefetch=None, wait=False,
                        arguments={"x-stream-offset": "first"} if queue == "stream" else None)
    return step


async def _raw_consume(p: Probe, queue: str, tag: str, no_ack: bool = False) -> None:
    """basic.consume as the bridge's own channel sends it: aiormq refuses a tag it has seen."""
    await p.channel.rpc(spec.Basic.Consume(queue=queue, consumer_tag=tag, no_ack=no_ack))


async def _tag_reuse(p: Probe) -> None:
    await _raw_consume(p, p.names["classic"], "T_same")
    await _raw_consume(p, p.names["classic2"], "T_same")


async def _tag_reuse_after_server_cancel(p: Probe) -> None:
    name = f"gone-{uuid.uuid4().hex[:6]}"
    await p.channel.queue_declare(name, durable=True)
    await _raw_consume(p, name, "T_x")
    await p.channel.queue_delete(name)
    await asyncio.sleep(0.3)  # basic.cancel from the server
    await _raw_consume(p, p.names["classic"], "T_x")


async def _prefetch_size(p: Probe) -> None:
    await p.channel.basic_qos(prefetch_size=1, prefetch_count=1)


async def _immediate(p: Probe) -> None:
    await p.channel.basic_publish(b"x", routing_key=p.names["classic"], immediate=True)


def _exchange(kind: str, args: dict | None = None) -> Step:
    async def step(p: Probe) -> None:
        await p.channel.exchange_declare(f"x-{uuid.uuid4().hex[:6]}", exchange_type=kind, durable=True,
                                         arguments=args)
    return step


def _declare(durable: bool = True, exclusive: bool = False, auto_delete: bool = False,
             args: dict | None = None, name: str | None = None) -> Step:
    async def step(p: Probe) -> None:
        await p.channel.queue_declare(name if name is not None else f"q-{uuid.uuid4().hex[:6]}", durable=durable,
                                      exclusive=exclusive, auto_delete=auto_delete, arguments=args)
    return step


async def _redeclare_stream_as_classic(p: Probe) -> None:
    await p.channel.queue_declare(p.names["stream"], durable=True)


async def _big_method(p: Probe) -> None:
    await p.channel.queue_declare(f"q-{uuid.uuid4().hex[:6]}", durable=True,
                                  arguments={"x-dead-letter-exchange": "v" * 200_000})


async def _big_header(p: Probe) -> None:
    await p.channel.basic_publish(b"x", routing_key=p.names["classic"],
                                  properties=spec.Basic.Properties(headers={"h": "v" * 200_000}))


async def _unknown_tag(p: Probe) -> None:
    await p.channel.basic_ack(999)


async def _double_ack(p: Probe) -> None:
    await p.consume(p.names["classic"])
    tag = p.deliveries[0].delivery_tag
    await p.channel.basic_ack(tag)
    await p.channel.basic_ack(tag)


async def _nack_multiple_zero(p: Probe) -> None:
    await p.consume(p.names["quorum"])
    await p.channel.basic_nack(0, multiple=True)


async def _channel_open_twice(p: Probe) -> None:
    ch = p.channel
    await ch.rpc(spec.Channel.Open())


async def _flow_off(p: Probe) -> None:
    await p.channel.rpc(spec.Channel.Flow(active=False))


async def _recover_no_requeue(p: Probe) -> None:
    await p.channel.basic_recover(requeue=False)


async def _purge_stream(p: Probe) -> None:
    await p.channel.queue_purge(p.names["stream"])


async def _exclusive_consume_busy(p: Probe) -> None:
    await p.consume(p.names["classic"], wait=False)
    await p.consume(p.names["classic"], wait=False, exclusive=True)


async def _reply_to_ack(p: Probe) -> None:
    await p.consume("amq.rabbitmq.reply-to", no_ack=False, prefetch=None, wait=False)


async def _reply_to_twice(p: Probe) -> None:
    await p.consume("amq.rabbitmq.reply-to", no_ack=True, prefetch=None, wait=False)
    await p.consume("amq.rabbitmq.reply-to", no_ack=True, prefetch=None, wait=False)


async def _reply_to_tag_reuse(p: Probe) -> None:
    await _raw_consume(p, "amq.rabbitmq.reply-to", "T_r", no_ack=True)
    await _raw_consume(p, p.names["classic"], "T_r")


async def _publish_reply_to_no_consumer(p: Probe) -> None:
    await p.channel.basic_publish(b"x", routing_key=p.names["classic"],
                                  properties=spec.Basic.Properties(reply_to="amq.rabbitmq.reply-to"))


async def _get_sac_quorum(p: Probe) -> None:
    name = f"sac-{uuid.uuid4().hex[:6]}"
    await p.channel.queue_declare(name, durable=True, arguments={"x-queue-type": "quorum",
                                                                 "x-single-active-consumer": True})
    await p.channel.basic_get(name)


async def _tx_ack_stream(p: Probe) -> None:
    await p.consume(p.names["stream"], arguments={"x-stream-offset": "first"})
    await p.channel.rpc(spec.Tx.Select())
    await p.channel.basic_nack(p.deliveries[0].delivery_tag)
    await p.channel.rpc(spec.Tx.Commit())


async def _publish_user_id(p: Probe) -> None:
    await p.channel.basic_publish(b"x", routing_key=p.names["classic"],
                                  properties=spec.Basic.Properties(user_id="someone-else"))


async def _publish_bad_expiration(p: Probe) -> None:
    await p.channel.basic_publish(b"x", routing_key=p.names["classic"],
                                  properties=spec.Basic.Properties(expiration="abc"))


async def _bind_headers_bad_match(p: Probe) -> None:
    await p.channel.queue_bind(p.names["classic"], "amq.headers", routing_key="", arguments={"x-match": "bogus"})


async def _bind_default_exchange(p: Probe) -> None:
    await p.channel.queue_bind(p.names["classic"], "", routing_key="k")


async def _consume_missing(p: Probe) -> None:
    await p.consume("no-such-queue", wait=False)


async def _stream_nack_after_cancel(p: Probe) -> None:
    await p.consume(p.names["stream"], arguments={"x-stream-offset": "first"}, tag="T_c")
    await p.channel.basic_cancel("T_c")
    await p.channel.basic_nack(p.deliveries[0].delivery_tag)


async def _stream_quorum_nack_mixed(p: Probe) -> None:
    await p.consume(p.names["quorum"], tag="T_q")
    p.got_delivery.clear()
    await p.consume(p.names["stream"], arguments={"x-stream-offset": "first"}, tag="T_s")
    await p.channel.basic_nack(0, multiple=True)


CASES: list[tuple[str, str, Step]] = [
    ("stream-nack", "NACK on a stream subscription", _nack_stream),
    ("stream-reject", "NACK requeue:false on a stream (the bridge nacks; reject for completeness)", _reject_stream),
    ("stream-nack-after-cancel", "NACK after UNSUBSCRIBE of a stream subscription", _stream_nack_after_cancel),
    ("stream-nack-multiple-mixed", "nack multiple over quorum and stream deliveries", _stream_quorum_nack_mixed),
    ("stream-nack-in-tx", "NACK in a committed AMQP tx (the bridge does not use tx)", _tx_ack_stream),
    ("stream-ack", "ACK on a stream (control)", _ack_stream),
    ("stream-autoack-prefetch", "ack:auto SUBSCRIBE to a stream with a prefetch",
     _consume("stream", no_ack=True, prefetch=10, arguments={"x-stream-offset": "first"})),
    ("stream-autoack-noprefetch", "ack:auto SUBSCRIBE to a stream without a prefetch",
     _consume("stream", no_ack=True, prefetch=0, arguments={"x-stream-offset": "first"})),
    ("stream-manual-noprefetch", "ack:client SUBSCRIBE to a stream, prefetch 0",
     _consume("stream", no_ack=False, prefetch=0)),
    ("stream-get", "browser:true on a stream (basic.get)", _get("stream")),
    ("stream-purge", "queue.purge on a stream (the bridge never purges)", _purge_stream),
    ("stream-offset-bogus-str", "x-stream-offset as an unknown string",
     _consume("stream", arguments={"x-stream-offset": "bogus"})),
    ("stream-offset-interval-str", "x-stream-offset as an interval string (1h)",
     _consume("stream", arguments={"x-stream-offset": "1h"})),
    ("stream-offset-negative", "x-stream-offset offset=-5 (a long)",
     _consume("stream", arguments={"x-stream-offset": -5})),
    ("stream-offset-huge", "x-stream-offset offset=2^62",
     _consume("stream", wait=False, arguments={"x-stream-offset": 1 << 62})),
    ("stream-offset-timestamp-epoch", "x-stream-offset timestamp=0",
     _consume("stream", arguments={"x-stream-offset": datetime.fromtimestamp(0, tz=timezone.utc)})),
    ("stream-offset-timestamp-future", "x-stream-offset timestamp in 9999",
     _consume("stream", wait=False, arguments={"x-stream-offset": datetime(9999, 1, 1, tzinfo=timezone.utc)})),
    ("stream-filter", "x-stream-filter on a stream", _consume("stream", wait=False,
     arguments={"x-stream-filter": ["a"], "x-stream-match-unfiltered": True})),
    ("classic-filter", "x-stream-filter on a classic queue", _consume("classic", wait=False,
     arguments={"x-stream-filter": ["a"]})),
    ("classic-stream-offset", "x-stream-offset on a classic queue", _consume("classic", wait=False,
     arguments={"x-stream-offset": "first"})),
    ("quorum-stream-offset", "x-stream-offset on a quorum queue", _consume("quorum", wait=False,
     arguments={"x-stream-offset": "first"})),
    ("stream-exclusive-consume", "exclusive consume on a stream", _consume("stream", wait=False, exclusive=True,
     arguments={"x-stream-offset": "first"})),
    ("stream-sac-consume", "x-single-active-consumer as a consume argument on a stream",
     _consume("stream", wait=False, arguments={"x-single-active-consumer": True, "name": "n"})),
    ("priority-consume-str", "x-priority as a string", _consume("classic", wait=False, arguments={"x-priority": "x"})),
    ("global-qos-stream", "global qos, then consume a stream", _global_qos_consume("stream")),
    ("global-qos-quorum", "global qos, then consume a quorum queue", _global_qos_consume("quorum")),
    ("global-qos-classic", "global qos, then consume a classic queue", _global_qos_consume("classic")),
    ("tag-reuse", "two consumers with one tag on a channel", _tag_reuse),
    ("tag-reuse-after-server-cancel", "a tag again after RabbitMQ cancelled it", _tag_reuse_after_server_cancel),
    ("reply-to-tag-reuse", "direct reply-to consumer, then its tag again", _reply_to_tag_reuse),
    ("reply-to-manual-ack", "consume amq.rabbitmq.reply-to with acks", _reply_to_ack),
    ("reply-to-twice", "consume amq.rabbitmq.reply-to twice", _reply_to_twice),
    ("publish-reply-to-no-consumer", "publish reply_to amq.rabbitmq.reply-to without its consumer",
     _publish_reply_to_no_consumer),
    ("prefetch-size", "basic.qos prefetch_size != 0", _prefetch_size),
    ("immediate", "basic.publish immediate", _immediate),
    ("exchange-bogus-type", "exchange.declare of an unknown type", _exchange("bogus")),
    ("exchange-delayed-type", "exchange.declare x-delayed-message without the plugin",
     _exchange("x-delayed-message", {"x-delayed-type": "direct"})),
    ("exchange-amq-prefix", "exchange.declare amq.*", lambda p: p.channel.exchange_declare(
        f"amq.x{uuid.uuid4().hex[:4]}", exchange_type="direct", durable=True)),
    ("transient-nonexcl", "transient non-exclusive queue (durable:false exclusive:false)",
     _declare(durable=False, exclusive=False, auto_delete=True)),
    ("transient-nonexcl-noautodelete", "transient non-exclusive, not auto-delete",
     _declare(durable=False, exclusive=False, auto_delete=False)),
    ("queue-type-bogus", "x-queue-type bogus", _declare(args={"x-queue-type": "bogus"})),
    ("queue-type-empty", "x-queue-type ''", _declare(args={"x-queue-type": ""})),
    ("stream-exclusive-declare", "stream declared exclusive", _declare(exclusive=True, args={"x-queue-type": "stream"})),
    ("stream-transient-declare", "stream declared non-durable", _declare(durable=False, args={"x-queue-type": "stream"})),
    ("quorum-exclusive-declare", "quorum declared exclusive", _declare(exclusive=True, args={"x-queue-type": "quorum"})),
    ("quorum-autodelete-declare", "quorum declared auto-delete", _declare(auto_delete=True,
                                                                          args={"x-queue-type": "quorum"})),
    ("quorum-server-named", "server-named quorum queue", _declare(name="", args={"x-queue-type": "quorum"})),
    ("stream-server-named", "server-named stream", _declare(name="", args={"x-queue-type": "stream"})),
    ("redeclare-stream-as-classic", "/queue/S without x-queue-type where S is a stream",
     _redeclare_stream_as_classic),
    ("max-priority-300", "x-max-priority 300", _declare(args={"x-max-priority": 300})),
    ("max-priority-neg", "x-max-priority -1", _declare(args={"x-max-priority": -1})),
    ("message-ttl-neg", "x-message-ttl -5", _declare(args={"x-message-ttl": -5})),
    ("expires-zero", "x-expires 0", _declare(args={"x-expires": 0})),
    ("max-length-neg", "x-max-length -1", _declare(args={"x-max-length": -1})),
    ("max-length-bytes-neg", "x-max-length-bytes -1", _declare(args={"x-max-length-bytes": -1})),
    ("overflow-bogus", "x-overflow bogus", _declare(args={"x-overflow": "bogus"})),
    ("overflow-dlx-stream", "x-overflow on a stream", _declare(args={"x-queue-type": "stream", "x-overflow": "drop-head"})),
    ("max-age-bogus", "x-max-age bogus on a stream", _declare(args={"x-queue-type": "stream", "x-max-age": "bogus"})),
    *[(f"max-age-{label}", f"x-max-age {value!r} on a stream",
       _declare(args={"x-queue-type": "stream", "x-max-age": value}))
      for label, value in (("empty", ""), ("unit", "1x"), ("number", "10"), ("years", "1Y"), ("neg", "-1h"),
                           ("zero", "0s"), ("huge", "99999999999999999999D"))],
    ("max-age-classic", "x-max-age on a classic queue", _declare(args={"x-max-age": "1h"})),
    ("segment-size-huge", "x-stream-max-segment-size-bytes 2^40",
     _declare(args={"x-queue-type": "stream", "x-stream-max-segment-size-bytes": 1 << 40})),
    ("segment-size-neg", "x-stream-max-segment-size-bytes -1",
     _declare(args={"x-queue-type": "stream", "x-stream-max-segment-size-bytes": -1})),
    ("filter-size-small", "x-stream-filter-size-bytes 5",
     _declare(args={"x-queue-type": "stream", "x-stream-filter-size-bytes": 5})),
    ("quorum-max-priority", "x-max-priority on a quorum queue",
     _declare(args={"x-queue-type": "quorum", "x-max-priority": 5})),
    ("quorum-ttl-expires", "x-message-ttl and x-expires on a quorum queue",
     _declare(args={"x-queue-type": "quorum", "x-message-ttl": 1000, "x-expires": 100000})),
    ("quorum-overflow-drop-head", "x-overflow drop-head on a quorum queue",
     _declare(args={"x-queue-type": "quorum", "x-overflow": "drop-head"})),
    ("stream-dlx", "x-dead-letter-exchange on a stream",
     _declare(args={"x-queue-type": "stream", "x-dead-letter-exchange": "amq.fanout"})),
    ("dlx-empty", "x-dead-letter-exchange ''", _declare(args={"x-dead-letter-exchange": ""})),
    ("dlrk-without-dlx", "x-dead-letter-routing-key without a DLX", _declare(args={"x-dead-letter-routing-key": "k"})),
    ("queue-amq-prefix", "queue named amq.*", _declare(name="amq.x")),
    ("queue-name-crlf", "queue name with CR LF", _declare(name="a\r\nb")),
    ("queue-name-nul", "queue name with NUL", _declare(name="a\x00b")),
    ("big-method", "a method over frame_max (queue arguments)", _big_method),
    ("big-content-header", "message headers over frame_max", _big_header),
    ("unknown-delivery-tag", "ack of an unknown delivery tag", _unknown_tag),
    ("double-ack", "the same delivery acked twice", _double_ack),
    ("nack-multiple-zero-quorum", "nack multiple delivery tag 0 on a quorum queue", _nack_multiple_zero),
    ("channel-open-twice", "channel.open on an open channel", _channel_open_twice),
    ("flow-off", "channel.flow active=false", _flow_off),
    ("recover-no-requeue", "basic.recover requeue=false", _recover_no_requeue),
    ("exclusive-consume-busy", "exclusive consume where another consumer is", _exclusive_consume_busy),
    ("get-sac-quorum", "basic.get on a single-active-consumer quorum queue", _get_sac_quorum),
    ("publish-user-id", "publish with another user_id", _publish_user_id),
    ("publish-bad-expiration", "publish expiration abc", _publish_bad_expiration),
    ("bind-headers-bad-match", "bind to amq.headers with x-match bogus", _bind_headers_bad_match),
    ("bind-default-exchange", "bind to the default exchange", _bind_default_exchange),
    ("consume-missing", "consume from a queue that is not there (control)", _consume_missing),
]


async def setup(url: str, names: dict[str, str]) -> None:
    connection = await aiormq.connect(url)
    channel = await connection.channel()
    await channel.queue_declare(names["classic"], durable=True)
    await channel.queue_declare(names["classic2"], durable=True)
    await channel.queue_declare(names["quorum"], durable=True, arguments={"x-queue-type": "quorum"})
    await channel.queue_declare(names["stream"], durable=True, arguments={"x-queue-type": "stream"})
    for queue in ("classic", "classic2", "quorum", "stream"):
        for n in range(200):
            await channel.basic_publish(f"m{n}".encode(), routing_key=names[queue])
    await connection.close()


async def run(broker: BrokerInfo, only: set[str] | None = None, log=print) -> dict[str, Outcome]:
    mgmt = Management(broker.api_url, "guest", "guest", timeout=30)
    vhost = mgmt.temporary_vhost("hard")
    url = broker.amqp_url.rstrip("/") + "/" + Management.q(vhost)
    names = {k: f"{k}-{uuid.uuid4().hex[:6]}" for k in ("classic", "classic2", "quorum", "stream")}
    out: dict[str, Outcome] = {}
    try:
        await setup(url, names)
        for name, _, step in CASES:
            if only and name not in only:
                continue
            try:
                out[name] = await run_case(url, names, step)
            except Exception as exc:  # noqa: BLE001 - reported as what happened
                out[name] = Outcome("error", None, repr(exc)[:200])
            log(f"{broker.name:6} {name:32} {str(out[name]).splitlines()[0][:220]}")
    finally:
        await asyncio.to_thread(mgmt.delete_vhost, vhost)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reliability.hard_errors", description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker", default="4.3", help="4.3, 4.0, system (3.10), 4.4; comma-separated for several")
    parser.add_argument("--only", help="comma-separated case names")
    parser.add_argument("--json", help="write {broker: {case: outcome}} here")
    args = parser.parse_args(argv)
    logging.getLogger("aiormq").setLevel(logging.CRITICAL)  # every refusal would be logged at ERROR
    only = set(args.only.split(",")) if args.only else None
    results = {}
    for name in args.broker.split(","):
        broker = broker_info(name)
        results[name] = {k: str(v) for k, v in asyncio.run(run(broker, only)).items()}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
