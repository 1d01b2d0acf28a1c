"""Who shares which AMQP connection (no broker: the opener is a stand-in)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from stomp_bridge.amqp.pool import AmqpPool
from stomp_bridge.amqp.reader import Hooks
from stomp_bridge.protocol.errors import AccessRefused


class FakeConnection:
    def __init__(self, loop: asyncio.AbstractEventLoop, channel_max: int = 2047, node: str = "a") -> None:
        self.url = SimpleNamespace(host=node, port=5672)  # aiormq's is a yarl URL
        self.connection_tune = SimpleNamespace(channel_max=channel_max)
        self.closing = loop.create_future()
        self.is_closed = False
        self.closed_count = 0

    async def close(self) -> None:
        self.is_closed = True
        self.closed_count += 1


class Opener:
    def __init__(self, fail: BaseException | None = None, channel_max: int = 2047) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.names: list[str] = []
        self.made: list[FakeConnection] = []
        self.fail = fail
        self.channel_max = channel_max
        self.gate: asyncio.Event | None = None
        self.nodes = ["a"]  # the nodes new connections land on, in turn

    async def __call__(self, login, passcode, vhost, name, **tls):
        self.calls.append((login, passcode, vhost))
        self.names.append(name)
        self.tls = tls
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        near = tls.get("near")  # connect_any tries that node first; here it always answers
        node = near[0] if near else self.nodes[len(self.made) % len(self.nodes)]
        self.made.append(FakeConnection(asyncio.get_running_loop(), self.channel_max, node))
        return self.made[-1], Hooks()

    async def check(self, login, passcode, vhost, name, **tls):
        """The login check: RabbitMQ's verdict without a connection kept."""
        self.calls.append((login, passcode, vhost))
        self.names.append(name)
        if self.fail is not None:
            raise self.fail

    @property
    def opened(self) -> int:
        """Connections opened to be shared (not the login checks)."""
        return sum(not name.endswith("login check") for name in self.names)

    @property
    def checks(self) -> int:
        return sum(name.endswith("login check") for name in self.names)


def run(coro):
    return asyncio.run(coro)


def test_same_credentials_share_until_the_cap_then_a_new_connection_opens():
    async def main():
        opener = Opener()
        pool = AmqpPool(opener, opener.check, channels_per_connection=2)
        a = await pool.acquire("u", "p", "/", "c")
        b = await pool.acquire("u", "p", "/", "c")
        c = await pool.acquire("u", "p", "/", "c")
        assert a is b and c is not a and opener.opened == 2
        assert opener.checks == pool.login_checks == 1  # b joined a: RabbitMQ checked b first
        return pool, a, c

    run(main())


@pytest.mark.parametrize("other", [("u", "other", "/"), ("v", "p", "/"), ("u", "p", "vh")])
def test_any_difference_in_user_passcode_or_vhost_opens_a_connection_rabbitmq_checks(other):
    async def main():
        opener = Opener()
        pool = AmqpPool(opener, opener.check)
        first = await pool.acquire("u", "p", "/", "c")
        second = await pool.acquire(*other, "c")
        assert first is not second
        assert opener.calls == [("u", "p", "/"), other]

    run(main())


def test_an_external_login_never_shares_with_a_password_login_of_the_same_name():
    async def main():
        opener = Opener()
        pool = AmqpPool(opener, opener.check)
        external = await pool.acquire("CN=alice", "", "/", "c", context="ctx", external=True)
        assert opener.tls == {"context": "ctx", "external": True}
        password = await pool.acquire("CN=alice", "", "/", "c")
        assert password is not external and len(opener.calls) == 2
        assert await pool.acquire("CN=alice", "", "/", "c", context="ctx", external=True) is external

    run(main())


def test_a_burst_of_logins_opens_one_connection_and_a_refusal_reaches_each_as_its_own_error():
    async def main():
        opener = Opener()
        opener.gate = asyncio.Event()
        pool = AmqpPool(opener, opener.check)
        tasks = [asyncio.ensure_future(pool.acquire("u", "p", "/", "c")) for _ in range(20)]
        await asyncio.sleep(0)
        opener.gate.set()
        shared = await asyncio.gather(*tasks)
        assert opener.opened == 1 and all(s is shared[0] for s in shared)
        assert opener.checks == 19, "every login that joins the connection is checked by RabbitMQ"
        assert shared[0].reserved == 20

        refusing = Opener(fail=AccessRefused("Bad CONNECT", "Access refused for user 'x'\n"))
        refusing.gate = asyncio.Event()
        pool = AmqpPool(refusing, refusing.check)
        tasks = [asyncio.ensure_future(pool.acquire("x", "bad", "/", "c")) for _ in range(5)]
        await asyncio.sleep(0)
        refusing.gate.set()
        errors = await asyncio.gather(*tasks, return_exceptions=True)
        assert len(refusing.calls) == 1
        assert all(isinstance(e, AccessRefused) for e in errors)
        assert len({id(e) for e in errors}) == 5, "each session annotates its own copy"

    run(main())


def test_the_last_session_out_closes_the_connection():
    async def main():
        opener = Opener()
        pool = AmqpPool(opener, opener.check)
        a = await pool.acquire("u", "p", "/", "c")
        await pool.acquire("u", "p", "/", "c")
        await pool.release(a)
        assert not a.connection.is_closed and pool.connection_count == 1
        await pool.release(a)
        assert a.connection.is_closed and pool.connection_count == 0

    run(main())


def test_an_old_connection_keeps_its_sessions_but_takes_no_new_login():
    async def main():
        now = [0.0]
        opener = Opener()
        pool = AmqpPool(opener, opener.check, reuse_seconds=60, clock=lambda: now[0])
        first = await pool.acquire("u", "p", "/", "c")
        now[0] = 59
        assert await pool.acquire("u", "p", "/", "c") is first
        now[0] = 61
        fresh = await pool.acquire("u", "p", "/", "c")
        assert fresh is not first and opener.opened == 2
        assert not first.connection.is_closed and first.reserved == 2

    run(main())


def test_a_lost_connection_is_not_handed_out_and_its_sessions_hear_why():
    async def main():
        opener = Opener()
        pool = AmqpPool(opener, opener.check)
        shared = await pool.acquire("u", "p", "/", "c")
        heard = []
        shared.sessions[1] = SimpleNamespace(connection_lost=heard.append)
        boom = ConnectionError("gone")
        shared.connection.closing.set_exception(boom)
        await asyncio.sleep(0)
        assert heard == [boom]
        assert await pool.acquire("u", "p", "/", "c") is not shared

    run(main())


def test_channel_numbers_stay_within_channel_max_and_skip_those_still_closing():
    async def main():
        opener = Opener(channel_max=3)
        pool = AmqpPool(opener, opener.check, channels_per_connection=10)
        shared = await pool.acquire("u", "p", "/", "c")
        assert shared.cap == 3, "the broker's channel_max wins"
        shared.sessions[1] = object()  # a lean channel closing: RabbitMQ has not sent close-ok yet
        numbers = []
        for _ in range(2):
            number = shared.free_number()
            shared.sessions[number] = object()
            numbers.append(number)
        assert sorted(numbers) == [2, 3]

    run(main())


def test_the_first_sessions_of_a_login_get_their_own_connections_then_share_the_least_loaded():
    async def main():
        opener = Opener()
        pool = AmqpPool(opener, opener.check, min_connections=3, channels_per_connection=10)
        first = [await pool.acquire("u", "p", "/", "c") for _ in range(3)]
        assert len({id(s) for s in first}) == 3
        await pool.release(first[1])
        await pool.acquire("u", "p", "/", "c")  # first[1] closed: below the minimum again, opens one
        assert len(opener.calls) == 4
        more = [await pool.acquire("u", "p", "/", "c") for _ in range(6)]
        assert sorted(s.reserved for s in {id(s): s for s in more}.values()) == [3, 3, 3]

    run(main())


def test_a_login_rabbitmq_now_refuses_never_joins_a_connection_opened_for_it_earlier():
    """The password changed (or the user was deleted, or lost the vhost) after the shared
    connection opened: the next login is RabbitMQ's decision, not the connection's."""
    async def main():
        opener = Opener()
        pool = AmqpPool(opener, opener.check)
        shared = await pool.acquire("u", "p", "/", "c")
        opener.fail = AccessRefused("Bad CONNECT", "Access refused for user 'u'")
        with pytest.raises(AccessRefused):
            await pool.acquire("u", "p", "/", "c")
        assert shared.reserved == 1 and opener.checks == 1

    run(main())


def test_the_login_cache_skips_the_check_only_within_its_time():
    async def main():
        now = [0.0]
        opener = Opener()
        pool = AmqpPool(opener, opener.check, login_cache_seconds=10, clock=lambda: now[0])
        first = await pool.acquire("u", "p", "/", "c")
        now[0] = 9
        assert await pool.acquire("u", "p", "/", "c") is first
        assert opener.checks == 0, "accepted 9 s ago: cached"
        now[0] = 20
        assert await pool.acquire("u", "p", "/", "c") is first
        assert opener.checks == 1, "the cache ran out: RabbitMQ checks it again"
        now[0] = 25
        await pool.acquire("u", "p", "/", "c")
        assert opener.checks == 1, "that check renewed the cache"
        await pool.acquire("u", "other", "/", "c")
        assert opener.opened == 2, "another passcode never rides on the cache"

    run(main())


def test_publishing_connections_are_a_group_of_their_own_and_skip_the_login_check():
    """A session's publishing channel never lands on a connection that carries consumers (a
    resource alarm blocks a publishing connection whole), and the session was checked at login."""
    async def main():
        opener = Opener()
        pool = AmqpPool(opener, opener.check, channels_per_connection=4)
        consuming = await pool.acquire("u", "p", "/", "c")
        publishing = await pool.acquire("u", "p", "/", "c publishing", publishing=True)
        assert publishing is not consuming and opener.opened == 2
        again = await pool.acquire("u", "p", "/", "c publishing", publishing=True)
        assert again is publishing and opener.checks == pool.login_checks == 0
        joined = await pool.acquire("u", "p", "/", "c")
        assert joined is consuming and opener.checks == 1  # a login is still RabbitMQ's decision

    run(main())


def test_a_publishing_connection_lingers_for_the_next_session_then_closes():
    """connect, SEND, DISCONNECT clients must not open and close a publishing connection each."""
    async def main():
        opener = Opener()
        pool = AmqpPool(opener, opener.check, linger_seconds=0.05)
        first = await pool.acquire("u", "p", "/", "c", publishing=True)
        await pool.release(first)
        assert not first.connection.is_closed and pool.connection_count == 1
        second = await pool.acquire("u", "p", "/", "c", publishing=True)
        assert second is first and opener.opened == 1
        await pool.release(second)
        async def closed():  # the linger time passes with nobody back
            while not first.connection.is_closed:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(closed(), 2)
        assert first.connection.closed_count == 1 and pool.connection_count == 0
        third = await pool.acquire("u", "p", "/", "c", publishing=True)
        assert third is not first and opener.opened == 2
        consuming = await pool.acquire("u", "p", "/", "c")
        await pool.release(consuming)
        assert consuming.connection.is_closed  # only publishing connections linger

    run(main())


def test_a_publishing_slot_is_taken_on_the_node_of_the_sessions_other_connection():
    """A publishing session then depends on one node, not two."""
    async def main():
        opener = Opener()
        opener.nodes = ["a", "b"]
        pool = AmqpPool(opener, opener.check, min_connections=2)
        on_a = await pool.acquire("u", "p", "/", "c")
        on_b = await pool.acquire("u", "p", "/", "c")
        assert (on_a.node, on_b.node) == (("a", 5672), ("b", 5672))
        pub_b = await pool.acquire("u", "p", "/", "c", publishing=True, near=on_b.node)
        pub_a = await pool.acquire("u", "p", "/", "c", publishing=True, near=on_a.node)
        assert (pub_a.node, pub_b.node) == (on_a.node, on_b.node)  # opened there
        again = await pool.acquire("u", "p", "/", "c", publishing=True, near=on_a.node)
        assert again is pub_a  # joined there, though pub_b, as loaded, came first

    run(main())


def test_a_connection_rabbitmq_closes_is_counted_by_reply_code_and_the_bridges_own_close_is_not():
    """What reliability/fuzz_isolation.py watches (stomp_bridge_amqp_connections_closed_by_rabbitmq):
    RabbitMQ's connection.close reaches the pool's callback with its reply code; the bridge's own
    close (aiormq's code 0) and a connection lost without a close do not."""
    import aiormq.exceptions as amqp_exc

    async def main():
        opener = Opener()
        codes: list[int] = []
        pool = AmqpPool(opener, opener.check, min_connections=4, on_broker_close=codes.append)
        for _ in range(4):
            await pool.acquire("u", "p", "/", "c")
        ends = [amqp_exc.ConnectionNotImplemented("NOT_IMPLEMENTED - basic.get not supported by stream queues"),
                amqp_exc.ConnectionClosed(320, "CONNECTION_FORCED - broker forced connection closure"),
                amqp_exc.ConnectionClosed(0, "normal closed"), ConnectionResetError("lost")]
        for connection, end in zip(opener.made, ends):
            connection.closing.set_exception(end)
        await asyncio.sleep(0)
        assert codes == [540, 320]

    run(main())
