"""Test support shared by ``tests/``, ``reliability/`` and ``bench/`` (not shipped in the wheel).

- :mod:`testkit.management`: RabbitMQ's management HTTP API (queues, vhosts, users, publish/get).
- :mod:`testkit.stomp`: a lean asyncio STOMP client on ``stomp_bridge.protocol``'s frames and parser.

Users' own tests use the public :mod:`stomp_bridge.testing` instead.
"""
