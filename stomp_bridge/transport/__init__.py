"""Sockets and what wraps them: listeners, links, the connection loop."""
