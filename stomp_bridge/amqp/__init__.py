"""The AMQP 0-9-1 side: the only package that imports aiormq and pamqp.

``connect`` logs in (failover over ``endpoints``, the handshake) and makes the ``pool`` of
shared connections; ``channel`` is one STOMP session's channel (publish, ack, RPCs), with the
ack:auto window's rule in ``autoack``; ``reader`` cuts deliveries and confirms out of the
socket's bytes, ``codec`` encodes and decodes the per-message frames, ``delivery`` is a
delivered message, ``errors`` maps aiormq's exceptions to the plugin's ERRORs.
``internals`` is the one module that touches aiormq's and pamqp's private names; its
``install`` runs when a bridge starts, never at import.
"""
