"""The AMQP 0-9-1 side: the only package that imports aiormq and pamqp.

``abc`` is what the session's driver sees: ``SessionChannel`` (one STOMP session's channel) and
``ChannelEvents`` (what it hears); ``channel.AmqpSession`` implements it on a ``lean`` channel,
with ``writer`` (batches to the socket), ``autoack`` (the ack:auto rule) and ``autoacker`` (its
timer and waits). ``connect`` logs in (failover over ``endpoints``) and makes the ``pool`` of
shared connections; ``handshake`` is the bridge's own AMQP handshake, for the ``probe`` and the
login check; ``reader`` cuts deliveries and confirms out of the socket's bytes, ``codec`` encodes
and decodes the per-message frames, ``delivery`` is a delivered message, ``errors`` maps AMQP
errors to the plugin's ERRORs, ``consumer`` consumes one queue for the Swaptacular forwarder.
``internals`` is the one module that touches aiormq's and pamqp's private names; its
``install`` runs when a bridge starts, never at import.
"""
