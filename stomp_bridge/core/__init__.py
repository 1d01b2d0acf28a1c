"""The STOMP core: every decision one STOMP connection makes, with no I/O (see ``machine.py``).

No asyncio, aiormq, pamqp or pydantic here, and nothing of the driver's side (an
import-linter contract in pyproject.toml holds it): frames and RabbitMQ's answers in,
frames and plans out. ``session/session.py`` is the driver that runs the plans.
"""
