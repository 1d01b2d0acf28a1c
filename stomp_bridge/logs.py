"""Structured logging: ``key=value`` text or one JSON object per line.

Fields passed through ``extra=`` are printed after the message, so a log line
can be grepped or parsed without a regular expression per message.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


def timestamp(record: logging.LogRecord) -> str:
    """The record's time in RFC 3339 (ISO 8601 with the zone), milliseconds, the machine's zone:
    ``2026-12-01T18:57:30.705+00:00``; logging's default (``2026-12-01 18:57:30,705``) names no
    zone and puts a comma before the milliseconds, which log pipelines do not parse as a time."""
    return datetime.fromtimestamp(record.created).astimezone().isoformat(timespec="milliseconds")


def _fields(record: logging.LogRecord) -> dict[str, object]:
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD and v not in ("", None)}


def _text(value: object) -> str:
    """A field's value in a text line: quoted (Python's repr) where it has a space, a quote or a
    character that is not printable, so a value a client chose (a login, a destination) cannot
    break the line or pass for another field."""
    if isinstance(value, str) and (not value.isprintable() or any(c in value for c in " '\"=")):
        return repr(value)
    return str(value)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        base = f"{timestamp(record)} {record.levelname} {record.name}: {record.getMessage()}"
        extra = " ".join(f"{k}={_text(v)}" for k, v in _fields(record).items())
        line = f"{base} {extra}" if extra else base
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, object] = {
            "time": timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        data.update(_fields(record))
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


class _Worker(logging.Filter):
    """Tags every line of a worker process (``workers`` > 1) with its index."""

    def __init__(self, index: int) -> None:
        super().__init__()
        self.index = index

    def filter(self, record: logging.LogRecord) -> bool:
        record.worker = self.index
        return True


def configure(level: str = "INFO", fmt: str = "text", worker: int | None = None) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    if worker is not None:
        handler.addFilter(_Worker(worker))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiormq logs every broker-side close and consumer cancel (at ERROR and
    # WARNING); the session already turns each into an ERROR frame and one log
    # line of its own, so aiormq speaks only when debugging.
    logging.getLogger("aiormq").setLevel(logging.DEBUG if root.level <= logging.DEBUG else logging.CRITICAL)


FRAME_BODY_SHOWN = 200
_MASKED_HEADERS = frozenset(("passcode",))


def log_frame(logger: logging.Logger, direction: str, peer: str, command: str,
              headers: dict[str, str], body: bytes) -> None:
    """One DEBUG line per frame (like Artemis' frame logging): passcodes masked, bodies cut."""
    shown = {k: ("***" if k in _MASKED_HEADERS else v) for k, v in headers.items()}
    text = body[:FRAME_BODY_SHOWN].decode("utf-8", "replace")
    if len(body) > FRAME_BODY_SHOWN:
        text += f"... ({len(body)} bytes)"
    logger.debug(
        "frame", extra={"direction": direction, "peer": peer, "command": command,
                        "headers": shown, "body": text}
    )
