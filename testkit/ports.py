"""Local TCP ports: one nobody listens on, and whether someone does."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port on 127.0.0.1 free now (the OS's pick; another process may take it before you bind)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_open(port: int, host: str = "127.0.0.1", timeout: float = 1.0) -> bool:
    """Whether something accepts a TCP connection on ``host:port`` within ``timeout`` seconds."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
