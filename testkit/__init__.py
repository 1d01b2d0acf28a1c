"""Test support shared by ``tests/``, ``reliability/`` and ``bench/`` (not shipped in the wheel).

- :mod:`testkit.brokers`: which RabbitMQ the tests use (``STOMP_BRIDGE_TEST_BROKER``,
  ``STOMP_BRIDGE_TEST_AMQP_URL``, Docker) and ``rabbitmqctl`` of that node.
- :mod:`testkit.management`: RabbitMQ's management HTTP API (queues, vhosts, users, publish/get).
- :mod:`testkit.stomp`: a lean asyncio STOMP client on ``stomp_bridge.protocol``'s frames and parser.
- :mod:`testkit.bridge`: the bridge in a thread of the test process, with the tests' defaults
  (over the public ``stomp_bridge.testing.BackgroundBridge``).
- :mod:`testkit.bridgeproc`: the bridge as a child process, its RSS, descriptors, tasks,
  connections and log records at ERROR read from outside; it can be killed and restarted.
- :mod:`testkit.faultproxy`: a TCP proxy that cuts, delays, pauses and refuses, on command.
- :mod:`testkit.fixtures`: the ``broker``, ``rabbit`` and ``unique`` pytest fixtures.
- :mod:`testkit.ports`: a free local port; whether one is open.
- :mod:`testkit.cluster`: the three-node RabbitMQ cluster of ``scripts/rabbitmq-cluster`` (node
  faults, alarms, the events to wait on), a resending publisher and a resubscribing consumer.
- :mod:`testkit.scenarios`: the cluster's fault scenarios, run short by ``tests/cluster`` and
  long by ``python -m reliability --only cluster``.
- :mod:`testkit.stats`: the percentile every printed p50/p90/p99 uses (bench, reliability, scenarios).
- :mod:`testkit.load`: load while failing, through bridge processes, in rounds, with each
  bridge's resources checked after every round (and its RSS bounded).

Users' own tests use the public :mod:`stomp_bridge.testing` instead.
"""
