"""stomp-bridge: a STOMP gateway that turns every frame into AMQP 0-9-1 against RabbitMQ."""

__version__ = "0.1.0"
