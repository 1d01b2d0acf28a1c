"""Which RabbitMQ node a new connection tries first."""

import pytest

from stomp_bridge.amqp.endpoints import MAX_DELAY, Endpoints


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_nodes_are_taken_in_turn_after_each_success():
    e = Endpoints("amqp://a/,amqp://b/,amqp://c/", clock=Clock())
    assert e.order() == [0, 1, 2]
    e.succeeded(0)
    assert e.order() == [1, 2, 0]
    e.succeeded(1)
    assert e.order() == [2, 0, 1]


def test_a_near_node_goes_first_while_it_is_up():
    """A session's publishing connection opens on the node of its other connection."""
    e = Endpoints("amqp://a/,amqp://b:5673/,amqp://c/", clock=Clock())
    assert e.order(near=("b", 5673)) == [1, 0, 2]
    assert e.order(near=("b", 5672)) == [0, 1, 2]  # no such node: the usual turn
    e.failed(1)
    assert e.order(near=("b", 5673)) == [0, 2, 1]  # backing off: not first


def test_a_failed_node_goes_last_until_its_backoff_ends_and_backoff_doubles():
    clock = Clock()
    e = Endpoints("amqp://a/,amqp://b/", clock=clock)
    e.failed(0)
    assert e.order() == [1, 0]
    clock.now += 0.5
    assert e.order() == [0, 1]
    e.failed(0)  # second failure: 1 s
    clock.now += 0.9
    assert e.order() == [1, 0]
    clock.now += 0.2
    assert e.order() == [0, 1]


def test_backoff_is_capped_and_reset_by_a_success():
    clock = Clock()
    e = Endpoints("amqp://a/,amqp://b/", clock=clock)
    for _ in range(20):
        e.failed(0)
    clock.now += MAX_DELAY
    assert e.order()[0] == 0
    e.failed(0)
    e.succeeded(0)
    assert e.order() == [1, 0]  # round robin moved on; no backoff left
    clock.now += 0.01
    assert 0 in e.order()


def test_when_every_node_backs_off_all_are_still_tried_soonest_first():
    clock = Clock()
    e = Endpoints("amqp://a/,amqp://b/", clock=clock)
    e.failed(1)
    e.failed(0)
    e.failed(0)
    assert e.order() == [1, 0]


@pytest.mark.parametrize(("url", "address"), [
    ("amqp://u:p@rabbit-0:5673/vh", ("rabbit-0", 5673)),
    ("amqps://rabbit-1/", ("rabbit-1", 5671)),
    ("amqp://rabbit-2", ("rabbit-2", 5672)),
])
def test_addresses(url, address):
    assert Endpoints(url).address(0) == address


def test_an_empty_list_is_refused():
    with pytest.raises(ValueError):
        Endpoints(" , ")
