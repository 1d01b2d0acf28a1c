"""Fuzzing the frame parser: whole and a byte at a time, under default and tiny limits.

The property (:func:`check`) holds for any input: the parser returns frames or
raises a :class:`StompError` (no other exception), feeding the same bytes whole
or one at a time gives the same frames and the same verdict, and while bytes
arrive in pieces the parser never holds more than ``max_frame_size`` of them.
A hang shows up as libFuzzer's per-input timeout.

Run it with atheris (coverage-guided, libFuzzer underneath) in a child process::

    python -m reliability.fuzz_parser -runs=1000000 CORPUS_DIR SEED_DIR

or, where atheris is not installed, :func:`mutation_fuzz` mutates the seeds
with a seeded random generator (blind, but the same property).
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository: `python -m reliability.fuzz_parser` runs there
DICT = Path(__file__).resolve().parent / "stomp.dict"
SEEDS = Path(__file__).resolve().parent / "corpus" / "parser"  # committed, replayed by reliability/tests

if __name__ == "__main__" and "--atheris" in sys.argv:
    import atheris

    with atheris.instrument_imports(include=["stomp_bridge"]):
        from stomp_bridge.protocol.errors import StompError
        from stomp_bridge.protocol.frames import VERSIONS
        from stomp_bridge.protocol.parser import FrameParser, Limits
else:
    from stomp_bridge.protocol.errors import StompError
    from stomp_bridge.protocol.frames import VERSIONS
    from stomp_bridge.protocol.parser import FrameParser, Limits

LIMITS = (Limits(), Limits(max_frame_size=300, max_headers=6, max_header_length=48))


def _feed(data: bytes, version: str, limits: Limits, step: int) -> tuple[list, str | None]:
    parser = FrameParser(limits, version)
    frames = []
    try:
        for i in range(0, len(data), step):
            parser.feed(data[i : i + step])
            while (frame := parser.next_frame()) is not None:
                frames.append(frame)
            if step < len(data) and parser.buffered > limits.max_frame_size:
                raise AssertionError(f"parser holds {parser.buffered} bytes, limit {limits.max_frame_size}")
    except StompError as exc:
        return frames, type(exc).__name__
    return frames, None


def check(data: bytes) -> int:
    """Assert the parser's property for ``data``; the first byte picks version and limits."""
    if not data:
        return 0
    version = VERSIONS[data[0] % 3]
    limits = LIMITS[(data[0] >> 2) & 1]
    stream = data[1:]
    whole = _feed(stream, version, limits, max(1, len(stream)))
    bytewise = _feed(stream, version, limits, 1)
    if whole[0] != bytewise[0] or (whole[1] is None) != (bytewise[1] is None):
        raise AssertionError(f"whole {whole} != byte at a time {bytewise} for {stream!r} ({version})")
    return len(whole[0])


def _atheris_main() -> None:
    argv = [a for a in sys.argv if a != "--atheris"]
    atheris.Setup(argv, check)
    atheris.Fuzz()


# -- running it ---------------------------------------------------------------------------

def run_atheris(runs: int, corpus: Path, max_len: int = 2048, timeout: float | None = None,
                seconds: int = 0) -> dict:
    """Fuzz in a child process; returns executions, corpus size and whether it crashed."""
    corpus.mkdir(parents=True, exist_ok=True)
    artifacts = corpus.parent / "artifacts"
    artifacts.mkdir(exist_ok=True)
    args = [sys.executable, "-m", "reliability.fuzz_parser", "--atheris", f"-runs={runs}",
            f"-max_len={max_len}", "-timeout=10", "-rss_limit_mb=2048", "-print_final_stats=1",
            f"-artifact_prefix={artifacts}/", f"-dict={DICT}", str(corpus), str(SEEDS)]
    if seconds:
        args.insert(4, f"-max_total_time={seconds}")
    started = time.monotonic()
    log = corpus.parent / "fuzz-parser.log"  # libFuzzer's progress lines, to follow a long run
    with open(log, "w") as f:
        proc = subprocess.run(args, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT,
                              timeout=timeout)
    out = log.read_text(errors="replace")
    done = re.findall(r"Done (\d+) runs", out)
    execs = re.findall(r"stat::number_of_executed_units:\s*(\d+)", out)
    executions = int(done[-1]) if done else int(execs[-1]) if execs else 0
    crashed = proc.returncode != 0
    return {
        "engine": "atheris",
        "executions": executions,
        "seconds": round(time.monotonic() - started, 1),
        "corpus": len(os.listdir(corpus)),
        "crashed": crashed,
        "output": out[-3000:] if crashed else "",
    }


def seeds() -> list[bytes]:
    return [p.read_bytes() for p in sorted(SEEDS.iterdir()) if p.is_file()] if SEEDS.is_dir() else []


_TOKENS = [b"\n", b"\r\n", b"\0", b":", b"\\", b"\\c", b"\\n", b"\\r", b"\\x", b"content-length:",
           b"content-length:99999999999", b"content-length:5", b"SEND\n", b"CONNECT\n", b"\n\n", b"\r"]


def mutate(rng: random.Random, data: bytes, pool: list[bytes]) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        pos = rng.randint(0, len(buf))
        if op == 0 and buf:
            buf[min(pos, len(buf) - 1)] = rng.randrange(256)
        elif op == 1:
            buf[pos:pos] = rng.choice(_TOKENS)
        elif op == 2 and buf:
            del buf[pos : pos + rng.randint(1, 8)]
        elif op == 3:
            other = rng.choice(pool)
            buf[pos:] = other[rng.randint(0, len(other)) :]
        elif op == 4:
            chunk = buf[pos : pos + rng.randint(1, 16)]
            buf[pos:pos] = chunk * rng.randint(1, 20)
        else:
            buf[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
    return bytes(buf[:4096])


def mutation_fuzz(runs: int, seed: int = 0) -> dict:
    """Blind mutational fuzzing of the seeds: the fallback when atheris is not installed."""
    rng = random.Random(seed)
    pool = seeds() or [b"\x02SEND\ndestination:/queue/a\n\nbody\0"]
    started = time.monotonic()
    for _ in range(runs):
        check(mutate(rng, rng.choice(pool), pool))
    return {"engine": "mutation", "executions": runs, "seconds": round(time.monotonic() - started, 1),
            "corpus": len(pool), "crashed": False, "output": ""}


def fuzz(runs: int, work: Path, seconds: int = 0) -> dict:
    try:
        import atheris  # noqa: F401
    except ImportError:
        return mutation_fuzz(runs)
    return run_atheris(runs, work / "corpus-parser", seconds=seconds)


if __name__ == "__main__" and "--atheris" in sys.argv:
    _atheris_main()
