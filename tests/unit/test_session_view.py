"""The session provides every member of SessionView, the interface extensions.py is typed
against; a renamed or removed member would otherwise fail only when an extension runs."""

from __future__ import annotations

import inspect

from stomp_bridge.session.session import Session
from stomp_bridge.session.view import SessionView
from stomp_bridge.settings import Settings


def test_session_provides_the_view():
    session = Session(Settings(port=0, ws_port=None, http_port=None), write=lambda data: None,
                      close_transport=lambda: None)
    members = set(SessionView.__annotations__) | {
        name for name, value in vars(SessionView).items() if inspect.isfunction(value)
    }
    assert {"channel", "writable", "flush", "deliver", "subscriptions", "ledger"} <= members
    for name in members:
        assert hasattr(session, name), name
        if inspect.isfunction(vars(SessionView).get(name)):
            assert inspect.iscoroutinefunction(getattr(session, name)) == inspect.iscoroutinefunction(
                vars(SessionView)[name]
            ), name
