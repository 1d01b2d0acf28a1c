"""The Spark client's fast parser of the server's frames (``ServerFrames``) is a second copy of
frame cutting: held here to the bridge's own ``FrameParser`` on any frames, cut anywhere."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from stomp_bridge.protocol.frames import Frame, serialize
from stomp_bridge.protocol.parser import FrameParser
from stomp_bridge.spark.client import _UNBOUNDED, ServerFrames

names = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), min_size=1, max_size=12)
values = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=20)
frames = st.builds(
    Frame,
    st.sampled_from(["MESSAGE", "RECEIPT", "ERROR"]),  # not CONNECTED: its headers are not escaped
    st.dictionaries(names, values, max_size=5),
    st.binary(max_size=64),
)


def reference(data: bytes) -> list[Frame]:
    parser = FrameParser(_UNBOUNDED)
    parser.feed(data)
    out = []
    while (frame := parser.next_frame()) is not None:
        out.append(frame)
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(frames, st.booleans(), st.sampled_from([b"", b"\n", b"\r\n\n"])), min_size=1, max_size=6),
       st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=20))
def test_server_frames_cut_what_the_bridges_parser_cuts(items, cuts):
    data = b"".join(
        (serialize(frame, "1.2") if with_length or b"\0" in frame.body else _without_length(frame)) + beats
        for frame, with_length, beats in items
    )
    fast, got, pos = ServerFrames(), [], 0
    for size in cuts + [len(data)]:
        fast.feed(data[pos:pos + size])
        pos += size
        while (frame := fast.next_frame()) is not None:
            got.append(frame)
        if pos >= len(data):
            break
    assert [(f.command, dict(f.headers), bytes(f.body)) for f in got] == \
           [(f.command, dict(f.headers), bytes(f.body)) for f in reference(data)]


def _without_length(frame: Frame) -> bytes:
    """The frame with its body ended by the NUL alone (no content-length), as a server may send."""
    headers = {k: v for k, v in frame.headers.items() if k != "content-length"}
    data = serialize(Frame(frame.command, headers, frame.body), "1.2")
    head, _, rest = data.partition(b"\n\n")
    lines = [line for line in head.split(b"\n") if not line.startswith(b"content-length:")]
    return b"\n".join(lines) + b"\n\n" + rest
