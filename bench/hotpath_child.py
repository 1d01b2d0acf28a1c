"""The bridge process of ``bench/hotpath.py``: ``stomp-bridge`` with a call counter on signals.

Run by path (``python bench/hotpath_child.py ARGS``) with the checkout to measure first on
``sys.path``, so an older checkout without this file is measured the same way. With
``HOTPATH_CALLS=<file>`` in the environment, SIGUSR1 starts counting the main thread's
function calls (``sys.setprofile``: Python functions and C functions called from Python
apart) and SIGUSR2 stops and writes ``<python calls> <c calls>`` to that file; with
``HOTPATH_DETAIL=<file>`` too, the count of each function goes to that file (the last count's).
"""

import os
import signal
import sys

counts = [0, 0]
detail: dict = {}
DETAIL = os.environ.get("HOTPATH_DETAIL", "")


def _profile(frame, event, arg):  # noqa: ANN001 - the profile hook's signature
    if event == "call":
        counts[0] += 1
        if DETAIL:
            code = frame.f_code
            key = f"{code.co_filename.rsplit('/', 2)[-2:]} {code.co_name}"
            detail[key] = detail.get(key, 0) + 1
    elif event == "c_call":
        counts[1] += 1
        if DETAIL:
            key = f"C {getattr(arg, '__qualname__', arg)}"
            detail[key] = detail.get(key, 0) + 1


def _start(signum, frame):  # noqa: ANN001
    counts[0] = counts[1] = 0
    detail.clear()
    sys.setprofile(_profile)


def _stop(signum, frame):  # noqa: ANN001
    sys.setprofile(None)
    with open(os.environ["HOTPATH_CALLS"], "w") as f:
        f.write(f"{counts[0]} {counts[1]}\n")
    if DETAIL:
        with open(DETAIL, "w") as f:
            for key, n in sorted(detail.items(), key=lambda kv: -kv[1]):
                f.write(f"{n}\t{key}\n")


if os.environ.get("HOTPATH_CALLS"):
    signal.signal(signal.SIGUSR1, _start)
    signal.signal(signal.SIGUSR2, _stop)

from stomp_bridge.cli import main  # noqa: E402 - after the handlers, from the checkout on sys.path

sys.exit(main())
