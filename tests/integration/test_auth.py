"""Permissions of the connected user, as RabbitMQ enforces them."""

from __future__ import annotations

import pytest
from testkit.brokers import plugin_words


@pytest.fixture
def user(rabbit, unique):
    name = f"user-{unique}"
    rabbit.create_user(name, "pw")
    yield name
    rabbit.delete_user(name)


def _denied(broker, permission: str) -> str:
    """RabbitMQ 4.x names the permission it refused ("write access to ..."); 3.10 did not."""
    return f"{permission} access" if broker.version_tuple >= (4, 0) else "access"


def test_send_without_write_permission_is_access_refused(connected, rabbit, broker, queues, unique, user):
    name = f"auth-{unique}"
    queues.append(name)
    rabbit.declare_queue(name)
    rabbit.set_permissions(user, write="^nothing$")
    conn = connected(login=user, passcode="pw")
    conn.send_frame("SEND", {"destination": f"/amq/queue/{name}", "receipt": "r"}, "x")
    error = conn.error_then_close()
    assert error["message"] == "access_refused"
    assert error.text == plugin_words(f"ACCESS_REFUSED - {_denied(broker, 'write')} to exchange 'amq.default' in vhost '/' "
                          f"refused for user '{user}'")
    assert rabbit.get(name) == []


def test_subscribe_without_read_permission_is_access_refused(connected, rabbit, broker, queues, unique, user):
    name = f"auth-{unique}"
    queues.append(name)
    rabbit.declare_queue(name)
    rabbit.set_permissions(user, read="^nothing$")
    conn = connected(login=user, passcode="pw")
    conn.send_frame("SUBSCRIBE", {"destination": f"/amq/queue/{name}", "id": "1"})
    error = conn.error_then_close()
    assert error["message"] == "access_refused"
    assert error.text == plugin_words(f"ACCESS_REFUSED - {_denied(broker, 'read')} to queue '{name}' in vhost '/' "
                          f"refused for user '{user}'")


def test_topic_permissions_apply_to_topic_send(connected, rabbit, broker, unique, user):
    rabbit.set_permissions(user)
    rabbit.set_topic_permissions(user, write="^allowed\\.")
    conn = connected(login=user, passcode="pw")
    conn.receipt("SEND", {"destination": f"/topic/allowed.{unique}"}, "ok")
    conn.send_frame("SEND", {"destination": f"/topic/denied.{unique}", "receipt": "r2"}, "no")
    error = conn.error_then_close()
    assert error["message"] == "access_refused"
    assert error.text == plugin_words(f"ACCESS_REFUSED - {_denied(broker, 'write')} to topic 'denied.{unique}' in exchange 'amq.topic' "
                          f"in vhost '/' refused for user '{user}'")


def test_user_without_vhost_access_cannot_connect(raw, unique, user):
    conn = raw()
    conn.send_frame("CONNECT", {"accept-version": "1.2", "login": user, "passcode": "pw"})
    error = conn.expect("ERROR")
    assert error["message"] == "Bad CONNECT"
    assert error.text == "Virtual host '/' access denied"


def test_topic_read_permissions_apply_to_topic_subscribe(connected, rabbit, broker, unique, user):
    rabbit.set_permissions(user)
    rabbit.set_topic_permissions(user, read="^allowed\\.")
    conn = connected(login=user, passcode="pw")
    conn.subscribe(f"/topic/allowed.{unique}", sub_id="ok")
    conn.send_frame("SUBSCRIBE", {"destination": f"/topic/denied.{unique}", "id": "no"})
    error = conn.error_then_close()
    assert error["message"] == "access_refused"
    # the plugin checks this itself, before any queue exists, and quotes RabbitMQ's refusal
    # without its reply code
    assert error.text == (f"{_denied(broker, 'read')} to topic 'denied.{unique}' in exchange "
                          f"'amq.topic' in vhost '/' refused for user '{user}'")
