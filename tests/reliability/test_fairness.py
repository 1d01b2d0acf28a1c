"""One client's pipelined burst must not hold the bridge's event loop (found by the receipt flood).

The hostile-client run showed a client flooding SENDs stall a well-behaved
client on the same bridge for seconds (p50 1.6 s), where the same flood through
RabbitMQ's own plugin did not: the transport loop handled every frame of a
256 KiB read (thousands of SENDs) without giving the loop back. Measured in
frames, not seconds: a callback that re-arms itself on every loop iteration
records how many SENDs the bridge had counted; no two consecutive iterations
may be further apart than the fair share.
"""

from __future__ import annotations

import asyncio
import threading

from stomp_bridge.core.machine import FAIR_SHARE

BURST = 4000


def test_a_pipelined_burst_gives_the_loop_back_every_fair_share_of_frames(bridge, dial, unique):
    server = bridge()
    loop, counters = server._loop, server._server.counters
    seen: list[int] = []
    stop = threading.Event()

    def tick() -> None:
        seen.append(counters.frames_in["SEND"])
        if not stop.is_set():
            loop.call_soon(tick)

    conn = dial(server)
    conn.connect()
    frame = f"SEND\ndestination:/topic/fair-{unique}\n\nx\0".encode()
    loop.call_soon_threadsafe(tick)
    conn.send_raw(frame * BURST)
    conn.receipt("SEND", {"destination": f"/topic/fair-{unique}"}, "last", receipt_id="done")
    stop.set()
    asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop).result(5)
    gaps = [b - a for a, b in zip(seen, seen[1:])]
    assert seen[-1] >= BURST + 1
    assert max(gaps) <= FAIR_SHARE, f"{max(gaps)} SENDs handled in one loop iteration {[g for g in gaps if g]}"
