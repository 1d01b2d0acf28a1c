"""The AMQP 0-9-1 side: the only code that knows aiormq's and pamqp's internals."""
