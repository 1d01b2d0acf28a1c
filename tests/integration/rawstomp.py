"""A tiny raw-socket STOMP client for byte-level integration tests.

It writes exactly the bytes a test gives it and reads frames back without
interpreting anything beyond framing (command, headers, body up to NUL or
``content-length``). Every read has a deadline; nothing sleeps.

Heart-beat EOLs between frames are counted in ``heartbeats`` rather than
returned as frames, so tests can measure them.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field

DEFAULT_TIMEOUT = 5.0


class ConnectionClosed(Exception):
    """The server closed the TCP connection."""


class FrameTimeout(Exception):
    """No complete frame arrived before the deadline."""


@dataclass
class Frame:
    command: str
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    raw: bytes = b""

    def get(self, name: str, default: str | None = None) -> str | None:
        """First value wins (STOMP 1.2: repeated headers)."""
        for key, value in self.headers:
            if key == name:
                return value
        return default

    def __getitem__(self, name: str) -> str:
        value = self.get(name)
        if value is None:
            raise KeyError(f"{name!r} not in {self.command} headers {self.headers!r}")
        return value

    def __contains__(self, name: str) -> bool:
        return self.get(name) is not None

    @property
    def header_dict(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for key, value in self.headers:
            out.setdefault(key, value)
        return out

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


def unescape_header(value: str) -> str:
    """STOMP 1.1/1.2 header value unescaping (\\\\, \\n, \\r, \\c)."""
    out = []
    i = 0
    while i < len(value):
        ch = value[i]
        if ch == "\\" and i + 1 < len(value):
            nxt = value[i + 1]
            out.append({"\\": "\\", "n": "\n", "r": "\r", "c": ":"}.get(nxt, "\\" + nxt))
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def escape_header(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace(":", "\\c")


def build_frame(command: str, headers: dict[str, str] | list[tuple[str, str]] | None = None,
                body: bytes | str = b"", *, escape: bool = False, content_length: bool = False) -> bytes:
    if isinstance(body, str):
        body = body.encode()
    items = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
    if content_length:
        items.append(("content-length", str(len(body))))
    lines = [command]
    for key, value in items:
        if escape:
            key, value = escape_header(key), escape_header(value)
        lines.append(f"{key}:{value}")
    return ("\n".join(lines) + "\n\n").encode() + body + b"\x00"


class RawStomp:
    """One TCP connection speaking STOMP byte by byte."""

    def __init__(self, address: tuple[str, int], timeout: float = DEFAULT_TIMEOUT) -> None:
        self.sock = socket.create_connection(address, timeout=timeout)
        self.timeout = timeout
        self.buf = b""
        self.closed = False
        self.heartbeats = 0
        # RabbitMQ writes an EOL after each frame's NUL; that one is not a heart-beat.
        self._after_frame = False
        self.version: str | None = None  # set by connect(); controls header unescaping
        self.pending: list[Frame] = []  # frames read while waiting for a RECEIPT

    # -- writing -----------------------------------------------------------------
    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, command: str, headers: dict[str, str] | list[tuple[str, str]] | None = None,
                   body: bytes | str = b"", **kwargs) -> None:
        self.send_raw(build_frame(command, headers, body, **kwargs))

    # -- reading -----------------------------------------------------------------
    def _fill(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise FrameTimeout(f"no frame within deadline; buffered {self.buf[:200]!r}")
        self.sock.settimeout(remaining)
        try:
            chunk = self.sock.recv(65536)
        except socket.timeout:
            raise FrameTimeout(f"no frame within deadline; buffered {self.buf[:200]!r}") from None
        except (ConnectionResetError, BrokenPipeError):
            chunk = b""
        if not chunk:
            self.closed = True
            raise ConnectionClosed(f"server closed the connection; buffered {self.buf[:200]!r}")
        self.buf += chunk

    def _try_parse(self) -> Frame | None:
        # Skip heart-beat EOLs between frames (STOMP 1.1+: EOL*).
        while self.buf[:1] in (b"\n", b"\r"):
            if self.buf[:2] == b"\r\n":
                self.buf = self.buf[2:]
            elif self.buf[:1] == b"\r":
                if len(self.buf) < 2:
                    return None
                break
            else:
                self.buf = self.buf[1:]
            if self._after_frame:
                self._after_frame = False
            else:
                self.heartbeats += 1
        if not self.buf:
            return None
        end = self.buf.find(b"\n\n")
        end_crlf = self.buf.find(b"\r\n\r\n")
        if end < 0 and end_crlf < 0:
            return None
        if end_crlf >= 0 and (end < 0 or end_crlf < end):
            head, body_start = self.buf[:end_crlf], end_crlf + 4
        else:
            head, body_start = self.buf[:end], end + 2
        lines = head.decode("utf-8", "replace").replace("\r\n", "\n").split("\n")
        command = lines[0]
        headers: list[tuple[str, str]] = []
        for line in lines[1:]:
            key, _, value = line.partition(":")
            if self.version in ("1.1", "1.2") and command != "CONNECTED":
                key, value = unescape_header(key), unescape_header(value)
            headers.append((key, value))
        length = None
        for key, value in headers:
            if key == "content-length":
                length = int(value)
                break
        if length is not None:
            if len(self.buf) < body_start + length + 1:
                return None
            body = self.buf[body_start:body_start + length]
            assert self.buf[body_start + length:body_start + length + 1] == b"\x00", "frame not NUL-terminated"
            consumed = body_start + length + 1
        else:
            nul = self.buf.find(b"\x00", body_start)
            if nul < 0:
                return None
            body = self.buf[body_start:nul]
            consumed = nul + 1
        raw = self.buf[:consumed]
        self.buf = self.buf[consumed:]
        # The native plugin writes "\0\n": an EOL in the same read as the frame
        # is that trailer; one arriving later is a heart-beat.
        self._after_frame = self.buf[:1] == b"\n"
        return Frame(command, headers, body, raw)

    def read_frame(self, timeout: float | None = None) -> Frame:
        if self.pending:
            return self.pending.pop(0)
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            frame = self._try_parse()
            if frame is not None:
                return frame
            self._fill(deadline)

    def expect(self, command: str, timeout: float | None = None) -> Frame:
        frame = self.read_frame(timeout)
        assert frame.command == command, f"expected {command}, got {frame.command} {frame.headers} {frame.body!r}"
        return frame

    def read_until_closed(self, timeout: float | None = None) -> list[Frame]:
        """Read frames until the server closes; fail if it does not within the deadline."""
        frames: list[Frame] = self.pending
        self.pending = []
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            try:
                frame = self._try_parse()
                if frame is not None:
                    frames.append(frame)
                    continue
                self._fill(deadline)
            except ConnectionClosed:
                return frames

    def error_then_close(self, timeout: float | None = None) -> Frame:
        """The next frame is ERROR and the server then closes the connection."""
        frames = self.read_until_closed(timeout)
        assert frames, "connection closed without an ERROR frame"
        assert frames[0].command == "ERROR", f"expected ERROR, got {frames[0].command} {frames[0].headers}"
        return frames[0]

    def error_then_usable(self, timeout: float | None = None) -> Frame:
        """The next frame is ERROR and the connection goes on (the plugin's non-fatal errors):
        a receipted SEND right after it gets its RECEIPT."""
        error = self.expect("ERROR", timeout)
        self.receipt("SEND", {"destination": "/topic/still-usable"}, b"x", receipt_id="still-usable")
        return error

    def no_frame(self, timeout: float = 0.5) -> None:
        """Assert nothing (but heart-beats) arrives within ``timeout`` seconds."""
        try:
            frame = self.read_frame(timeout)
        except FrameTimeout:
            return
        raise AssertionError(f"unexpected frame {frame.command} {frame.headers} {frame.body!r}")

    # -- conveniences ------------------------------------------------------------
    def connect(self, version: str | None = "1.2", login: str = "guest", passcode: str = "guest",
                host: str | None = "/", heart_beat: str | None = None, command: str = "CONNECT",
                extra: dict[str, str] | None = None) -> Frame:
        headers: dict[str, str] = {}
        if version is not None:
            headers["accept-version"] = version
        if host is not None:
            headers["host"] = host
        if login is not None:
            headers["login"] = login
        if passcode is not None:
            headers["passcode"] = passcode
        if heart_beat is not None:
            headers["heart-beat"] = heart_beat
        headers.update(extra or {})
        self.send_frame(command, headers)
        frame = self.expect("CONNECTED")
        self.version = frame.get("version", "1.0")
        return frame

    def receipt(self, command: str, headers: dict[str, str], body: bytes | str = b"",
                receipt_id: str = "r-1", **kwargs) -> Frame:
        """Send a frame with a receipt and wait for that RECEIPT (failing on ERROR)."""
        self.send_frame(command, {**headers, "receipt": receipt_id}, body, **kwargs)
        return self.wait_receipt(receipt_id)

    def wait_receipt(self, receipt_id: str, timeout: float | None = None) -> Frame:
        """Read until RECEIPT ``receipt_id``; MESSAGEs and other RECEIPTs read meanwhile stay
        pending for later ``read_frame`` calls. An ERROR fails the wait."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        stash: list[Frame] = []
        try:
            while True:
                while True:
                    frame = self._try_parse()
                    if frame is not None:
                        break
                    self._fill(deadline)
                if frame.command == "RECEIPT" and frame.get("receipt-id") == receipt_id:
                    return frame
                assert frame.command != "ERROR", f"expected RECEIPT, got ERROR {frame.headers} {frame.body!r}"
                stash.append(frame)
        finally:
            self.pending.extend(stash)

    def subscribe(self, destination: str, sub_id: str = "s-1", ack: str = "auto",
                  headers: dict[str, str] | None = None) -> None:
        """SUBSCRIBE and wait until the server confirmed it with a RECEIPT."""
        self.receipt("SUBSCRIBE", {"destination": destination, "id": sub_id, "ack": ack, **(headers or {})},
                     receipt_id=f"sub-{sub_id}")

    def close(self) -> None:
        try:
            self.sock.close()
        finally:
            self.closed = True

    def __enter__(self) -> "RawStomp":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
