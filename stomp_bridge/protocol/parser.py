"""Incremental, I/O-free STOMP frame parser.

The grammar follows RabbitMQ's ``rabbit_stomp_frame`` (STOMP 1.0/1.1/1.2 with
its leniencies), with escaping made version-aware as the spec asks::

    frame_seq ::= *(noise frame)
    noise     ::= *(NUL | eol)            heart-beats; RabbitMQ also skips NULs
    eol       ::= LF | CR LF              CR LF accepted in every version
    frame     ::= cmd hdrs body NUL
    cmd       ::= token eol               token: ASCII letter, then letters,
                                          digits, '-' or '_'; at most 32 bytes
    hdrs      ::= *hdr eol
    hdr       ::= hdrname COLON hdrvalue eol
    hdrname   ::= 1*(NOTEOL - COLON)      split on the first raw colon; the
    hdrvalue  ::= *NOTEOL                 value may hold more colons
    body      ::= *OCTET                  content-length octets, else up to NUL

A CR anywhere but right before LF is an error, as in the plugin (1.2 clients
send it as ``\\r``). Header names and values are UTF-8 and are unescaped per
version: not in 1.0, and never in CONNECT, STOMP or CONNECTED frames.

The parser returns one frame per :meth:`FrameParser.next_frame` call because
the session changes :attr:`FrameParser.version` (and may change
:attr:`FrameParser.limits`) after CONNECT, and frames pipelined behind it must
be read under the negotiated version.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from stomp_bridge.protocol.errors import FrameTooLarge, ProtocolError, StompError
from stomp_bridge.protocol.frames import CONTENT_LENGTH, UNESCAPED_COMMANDS, VERSIONS, Frame

# RabbitMQ's MAX_COMMAND_LENGTH: the longest command, UNSUBSCRIBE, plus headroom.
MAX_COMMAND_LENGTH = 32

_COMMAND = re.compile(rb"[A-Za-z][A-Za-z0-9_-]{0,%d}" % (MAX_COMMAND_LENGTH - 1))
_COMMAND_TEXT = re.compile(_COMMAND.pattern.decode())
# The one-pass path looks this far for the end of a head; a longer head takes the line-by-line
# path, so a buffer of CR LF frames is never searched to its end for each frame.
WHOLE_HEAD_SCAN = 8192
# A body of at least this many bytes (with a content-length) that is not all here yet is
# received into a bytearray of its own, allocated once at its full length (content-length
# bytes and the NUL): each chunk is copied into it where it belongs, or the socket reads into
# it directly (body_window), and it becomes the frame's body as it is (no join, no slice).
COLLECT_BODY = 64 * 1024
# ... once an eighth of it has come: a head alone (a few hundred bytes) never makes the bridge
# allocate its content-length, so what a client costs stays within 8 times what it sent.
BODY_ARRIVED_SHIFT = 3
_CONTENT_LENGTH = re.compile(r"[ \t]*([0-9]+)[ \t]*")
_ESCAPE = re.compile(r"\\(.?)", re.DOTALL)
# STOMP 1.1: \n \c \\ ; STOMP 1.2 adds \r. Anything else is a fatal protocol error.
_UNESCAPES = {
    "1.1": {"n": "\n", "c": ":", "\\": "\\"},
    "1.2": {"n": "\n", "c": ":", "\\": "\\", "r": "\r"},
}

_NOISE, _HEAD, _BODY = range(3)
_NOISE_OCTETS = frozenset((0, 10, 13))  # what may come between frames (see _skip_noise)


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds on what one frame may make the parser hold.

    ``max_frame_size`` counts every byte from the command to the closing NUL,
    so buffered memory never exceeds it for a frame in progress.
    ``max_header_length`` counts one header line's bytes without its EOL.
    ``max_headers`` counts header lines, repeats included, because each costs
    work even when first-wins discards it.
    """

    max_frame_size: int = 4 * 1024 * 1024
    max_headers: int = 1000
    max_header_length: int = 65536


def _unescaper(version: str) -> Callable[[str], str]:
    table = _UNESCAPES[version]

    def replace(match: re.Match[str]) -> str:
        try:
            return table[match.group(1)]
        except KeyError:
            raise ProtocolError(
                "Invalid escape sequence",
                f"\\{match.group(1)} is not defined in STOMP {version} headers",
            ) from None

    def unescape(text: str) -> str:
        return _ESCAPE.sub(replace, text)

    return unescape


_UNESCAPERS = {version: _unescaper(version) for version in _UNESCAPES}


def _excerpt(data: bytes | bytearray) -> str:
    return repr(bytes(data[:40])) + ("..." if len(data) > 40 else "")


class FrameParser:
    """Turns a byte stream into frames, one per :meth:`next_frame` call.

    Feed bytes with :meth:`feed`, then call :meth:`next_frame` until it returns
    ``None``; memory then stays within :class:`Limits`. Searches resume where
    the last one stopped, so a frame fed one byte at a time costs linear time.
    After a :class:`~stomp_bridge.protocol.errors.StompError` the stream is out
    of sync and the parser must not be used again.
    """

    # One per connection: slots keep the thousands of idle ones small.
    __slots__ = (
        "limits", "_version", "_buf", "large_body", "_collected", "_body_start", "_command", "_header_lines",
        "_headers", "_length", "_phase", "_pos", "_scan", "_unescape",
    )

    def __init__(self, limits: Limits = Limits(), version: str = "1.2") -> None:
        self.limits = limits
        self.version = version
        self._buf = bytearray()
        # A large body with a content-length (COLLECT_BODY) being received: its bytes and the
        # NUL, filled up to _collected, rather than appended to the buffer and copied out of it
        # again. Public so that a socket's reader can tell, without a call, whether to ask for
        # body_window (read-only for anyone else).
        self.large_body: bytearray | None = None
        self._collected = 0
        self._reset()

    @property
    def version(self) -> str:
        return self._version

    @version.setter
    def version(self, version: str) -> None:
        if version not in VERSIONS:
            raise ValueError(f"unknown STOMP version {version!r}")
        self._version = version

    @property
    def buffered(self) -> int:
        """How many received bytes are not yet part of a returned frame."""
        if self.large_body is not None:
            return self._body_start + self._collected + len(self._buf)
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Take received bytes (copied: the caller may reuse ``data``'s memory)."""
        body = self.large_body
        if body is not None:  # a large body: copied to its place in the body's own buffer
            filled = self._collected
            room = len(body) - filled
            if room:
                size = len(data)
                if size <= room:
                    body[filled : filled + size] = data
                    self._collected = filled + size
                    return
                with memoryview(data) as view:
                    body[filled:] = view[:room]
                    self._collected = filled + room
                    self._buf += view[room:]
                return
        elif not self._buf and self._phase == _NOISE and len(data) >= COLLECT_BODY and self._large_head(data):
            return
        self._buf += data

    def _large_head(self, data: bytes | bytearray | memoryview) -> bool:
        """A chunk that begins with a frame (nothing buffered before it): if that frame's whole
        head is in the chunk's first WHOLE_HEAD_SCAN bytes and its content-length makes it a large
        body that the chunk does not finish, the head is parsed now and the rest of the chunk
        copied straight into the body's buffer (not into this buffer, then out again). Anything
        else (noise first, an unusual head, an error to report) returns False with nothing
        changed: ``next_frame`` then reads the chunk as usual, and raises what it finds.

        Parsing the head here reads it under the version and limits of now, which are those
        next_frame would use: nothing buffered means every frame before it was returned."""
        with memoryview(data) as view:
            first = view[:WHOLE_HEAD_SCAN].tobytes()
            end = first.find(b"\n\n")
            if end <= 0 or first[0] in (10, 13, 0) or b"content-length:" not in first[:end]:
                return False
            start = end + 2
            self._buf += first[:start]
            self._phase = _HEAD
            try:
                parsed = self._whole_head()
            except StompError:
                parsed = False
            length = self._length
            if parsed and length is not None and len(view) - start <= length and self._begin_large_body(view, start):
                del self._buf[:]
                return True
            self._buf = bytearray()  # as it was: the usual path reads the whole chunk
            self._reset()
            return False

    def _begin_large_body(self, view: memoryview, start: int) -> bool:
        """The body that begins at ``start`` of ``view``, if it is a large one and an eighth of it
        is here: its own buffer, at its full size (bounded by max_frame_size, checked with the
        content-length), what is here of it at its start; True then (the head is done with)."""
        length = self._length
        arrived = len(view) - start
        if length is None or length < COLLECT_BODY or arrived < length >> BODY_ARRIVED_SHIFT:
            return False
        body = self.large_body = bytearray(length + 1)
        body[:arrived] = view[start:]
        self._collected = arrived
        return True

    def body_window(self) -> memoryview | None:
        """Where the rest of a large body goes (its bytes still due and its NUL), for a socket
        to read into directly; None when no large body is being received. Once bytes are read
        into it, :meth:`body_filled` says how many."""
        body = self.large_body
        if body is None or self._collected == len(body) or self._buf:
            return None
        return memoryview(body)[self._collected :]

    def body_filled(self, size: int) -> None:
        """``size`` bytes were read into the start of :meth:`body_window`'s window."""
        self._collected += size

    def clear(self) -> None:
        """Drop everything buffered: the connection has ended. A frame in progress may hold
        max_frame_size bytes, and a connection's objects refer to each other, so without this
        they would wait for the garbage collector (half a megabyte for each junk flood's
        connection, measured)."""
        self._buf = bytearray()
        self.large_body = None
        self._collected = 0
        self._reset()

    def frames(self, data: bytes = b"") -> list[Frame]:
        """``data`` fed, then every frame complete so far."""
        if data:
            self.feed(data)
        out = []
        while (frame := self.next_frame()) is not None:
            out.append(frame)
        return out

    def next_frame(self) -> Frame | None:
        if self._phase == _NOISE:
            buf = self._buf
            if not buf:
                return None
            if buf[0] in _NOISE_OCTETS:
                if not self._skip_noise():
                    return None
            else:  # a frame right after the last: nothing to skip
                self._phase = _HEAD
        if self._phase == _HEAD and (self._command or not self._whole_head()) and not self._read_head():
            return None
        return self._read_body()

    def _reset(self) -> None:
        self._phase = _NOISE
        self._pos = 0  # start of the first unparsed line of the current frame
        self._scan = 0  # where the next search for LF or NUL starts
        self._command = ""
        self._unescape: Callable[[str], str] | None = None
        self._headers: dict[str, str] = {}
        self._header_lines = 0
        self._body_start = 0
        self._length: int | None = None

    def _skip_noise(self) -> bool:
        # STOMP 1.1/1.2: EOLs may follow a frame's NUL and serve as heart-beats.
        buf = self._buf
        size = len(buf)
        i = 0
        while i < size:
            octet = buf[i]
            if octet == 10 or octet == 0:
                i += 1
            elif octet == 13:
                if i + 1 == size:
                    break
                if buf[i + 1] != 10:
                    raise ProtocolError("Invalid frame", "CR not followed by LF between frames")
                i += 2
            else:
                del buf[:i]
                self._phase = _HEAD
                return True
        del buf[:i]
        return False

    def _read_head(self) -> bool:
        buf = self._buf
        limits = self.limits
        max_line = limits.max_header_length
        headers = self._headers
        pos = self._pos
        try:
            while True:
                eol = buf.find(b"\n", self._scan)
                if eol < 0:
                    self._scan = len(buf)
                    self._pos = pos  # the partial line starts here, not where this call began
                    self._check_partial_line()
                    return False
                start = pos
                end = eol - 1 if eol > start and buf[eol - 1] == 13 else eol
                pos = self._scan = eol + 1
                if eol + 1 >= limits.max_frame_size:  # a NUL must still follow
                    raise self._frame_too_large()
                if not self._command:
                    self._read_command(start, end)
                    continue
                if start == end:
                    self._start_body(pos)
                    return True
                self._header_lines += 1
                if end - start > max_line or self._header_lines > limits.max_headers:
                    raise self._too_much()
                try:
                    name, colon, value = buf[start:end].decode().partition(":")
                except UnicodeDecodeError:
                    raise ProtocolError("Invalid header", "header is not valid UTF-8") from None
                if not name or not colon or "\r" in name or "\r" in value:
                    raise self._bad_header(start, end)
                if self._unescape is not None:
                    if "\\" in name:
                        name = self._unescape(name)
                    if "\\" in value:
                        value = self._unescape(value)
                # STOMP 1.2: if a header is repeated, only the first value is used.
                if name not in headers:
                    headers[name] = value
        finally:
            self._pos = pos

    def _whole_head(self) -> bool:
        """The common case in one pass: the frame's whole head (command to blank line) is
        buffered, LF-only and ASCII. It is decoded once and split, instead of a search, a
        slice and a decode per line (half the parser's time on a small SEND). Anything
        unusual (CR LF, UTF-8, a limit reached, a line without a colon) returns False before
        changing any state, and the line-by-line path below reads it and says what is wrong.
        """
        buf = self._buf
        limits = self.limits
        # max_frame_size - 1: the line-by-line path refuses a frame whose blank line ends at
        # max_frame_size (a NUL must still follow), so that one is left to it.
        end = buf.find(b"\n\n", self._pos, min(limits.max_frame_size - 1, self._pos + WHOLE_HEAD_SCAN))
        if end < 0:
            return False
        text = buf[self._pos : end].decode("latin-1")
        if not text.isascii() or "\r" in text:
            return False
        lines = text.split("\n")
        command = lines[0]
        if len(lines) > limits.max_headers + 1 or not _COMMAND_TEXT.fullmatch(command):
            return False
        if end - self._pos > limits.max_header_length and max(map(len, lines)) > limits.max_header_length:
            return False
        # _unescaper, inlined: once per frame (test_parser's splits hold both heads' paths together)
        unescape = None if self._version == "1.0" or command in UNESCAPED_COMMANDS else _UNESCAPERS[self._version]
        headers = self._headers
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not name or not colon:
                headers.clear()
                return False
            if unescape is not None:
                if "\\" in name:
                    name = unescape(name)
                if "\\" in value:
                    value = unescape(value)
            # STOMP 1.2: if a header is repeated, only the first value is used.
            if name not in headers:
                headers[name] = value
        self._command = command
        self._unescape = unescape
        self._header_lines = len(lines) - 1
        self._pos = end + 2
        if CONTENT_LENGTH in headers:
            self._start_body(end + 2)
        else:  # _start_body's part for a frame without content-length: most ACKs and SENDs
            self._phase = _BODY
            self._body_start = self._scan = end + 2
        return True

    def _check_partial_line(self) -> None:
        buf = self._buf
        limits = self.limits
        length = len(buf) - self._pos
        if buf and buf[-1] == 13:
            length -= 1  # may be the first half of CR LF
        if not self._command:
            if length > MAX_COMMAND_LENGTH:
                raise ProtocolError(
                    "Invalid command",
                    f"no command within {MAX_COMMAND_LENGTH} bytes: {_excerpt(buf)}",
                )
        elif length > limits.max_header_length:
            raise self._header_too_long()
        # The NUL is still to come, so the frame will be larger than this.
        if len(buf) >= limits.max_frame_size:
            raise self._frame_too_large()

    def _read_command(self, start: int, end: int) -> None:
        buf = self._buf
        if not _COMMAND.fullmatch(buf, start, end):
            raise ProtocolError(
                "Invalid command", f"not a STOMP command: {_excerpt(buf[start:end])}"
            )
        command = buf[start:end].decode("ascii")
        self._command = command
        self._unescape = self._unescaper(command)

    def _unescaper(self, command: str) -> Callable[[str], str] | None:
        """How this frame's header text is unescaped: not in 1.0, nor in CONNECT, STOMP and
        CONNECTED frames."""
        if self._version == "1.0" or command in UNESCAPED_COMMANDS:
            return None
        return _UNESCAPERS[self._version]

    def _too_much(self) -> FrameTooLarge:
        max_headers = self.limits.max_headers
        if self._header_lines > max_headers:
            return FrameTooLarge(
                "Too many headers", f"a frame may have at most {max_headers} headers"
            )
        return self._header_too_long()

    def _header_too_long(self) -> FrameTooLarge:
        return FrameTooLarge(
            "Header too long", f"a header line may be at most {self.limits.max_header_length} bytes"
        )

    def _bad_header(self, start: int, end: int) -> ProtocolError:
        line = self._buf[start:end]
        if b"\r" in line:
            problem = "CR not followed by LF in a header line"
        elif b":" not in line:
            problem = f"header line without a colon: {_excerpt(line)}"
        else:
            problem = f"empty header name: {_excerpt(line)}"
        return ProtocolError("Invalid header", problem)

    def _start_body(self, start: int) -> None:
        self._phase = _BODY
        self._body_start = self._scan = start
        declared = self._headers.get(CONTENT_LENGTH)
        if declared is None:
            return
        if declared.isdigit() and declared.isascii():  # the usual case, without the regex
            digits = declared.lstrip("0") or "0"
        else:
            match = _CONTENT_LENGTH.fullmatch(declared)
            if match is None:
                raise ProtocolError(
                    "Invalid content-length",
                    f"content-length must be a non-negative integer, not {declared[:40]!r}",
                )
            digits = match.group(1).lstrip("0") or "0"
        max_size = self.limits.max_frame_size
        # Refuse before buffering: the length alone says the frame is too big.
        if len(digits) > len(str(max_size)) or start + int(digits) + 1 > max_size:
            raise FrameTooLarge(
                "Frame too large",
                f"content-length {digits[:20]} makes the frame exceed {max_size} bytes",
            )
        self._length = int(digits)

    def _read_body(self) -> Frame | None:
        if self.large_body is not None:
            return self._collected_body()
        buf = self._buf
        start = self._body_start
        if self._length is not None:
            end = start + self._length
            if len(buf) <= end:
                if self._length >= COLLECT_BODY:
                    with memoryview(buf) as view:
                        begun = self._begin_large_body(view, start)
                    if begun:
                        del buf[:]
                return None
            if buf[end] != 0:
                raise ProtocolError(
                    "Missing frame terminator",
                    f"expected NUL after the {self._length} body bytes given by content-length",
                )
        else:
            end = buf.find(b"\0", self._scan)
            if end < 0:
                self._scan = len(buf)
                if len(buf) >= self.limits.max_frame_size:
                    raise self._frame_too_large()
                return None
            if end >= self.limits.max_frame_size:
                raise self._frame_too_large()
        if end - start < 4096:
            body = bytes(buf[start:end])
        else:  # one copy, not two (the bytearray slice, then bytes of it)
            with memoryview(buf) as view:
                body = view[start:end].tobytes()
        frame = Frame(self._command, self._headers, body)
        del buf[: end + 1]
        self._reset()
        return frame

    def _collected_body(self) -> Frame | None:
        body = self.large_body
        assert body is not None and self._length is not None
        length = self._length
        if self._collected <= length:
            return None  # the body, or its NUL, is still to come
        if body[length] != 0:
            raise ProtocolError(
                "Missing frame terminator",
                f"expected NUL after the {length} body bytes given by content-length",
            )
        del body[length:]  # the NUL: the size shrinks, nothing moves
        # The body is the bytearray itself (no copy): the parser never touches it again.
        frame = Frame(self._command, self._headers, body)  # type: ignore[arg-type]
        self.large_body = None
        self._collected = 0
        self._reset()
        return frame

    def _frame_too_large(self) -> FrameTooLarge:
        return FrameTooLarge(
            "Frame too large", f"a frame may be at most {self.limits.max_frame_size} bytes"
        )
