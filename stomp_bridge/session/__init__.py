"""One STOMP connection's logic, between the transport and the AMQP side."""
