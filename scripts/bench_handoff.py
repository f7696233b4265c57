"""The log thread's hand-off alone (issue 19, round 5): how long a job waits for the log
thread to start it (``in``) and how long the loop takes to see it done (``out``) while the
event loop runs Python, with no disk sync and no network.

The loop runs a busy callback of --busy-us microseconds every --gap-ms (a read of a burst
of appends); a coroutine submits a 128-byte ``os.pwrite`` (which releases the GIL like the
log's ``pwritev``) to a real ``LogThread`` every --every-ms and awaits it. If the log
thread waited for the GIL behind the loop's Python, ``in`` would reach the busy time or
the switch interval (5 ms); when it does not, the waits seen in ``bench_latency.py`` come
from elsewhere (the kernel's scheduler on a full machine, the disk).

    .venv/bin/python scripts/bench_handoff.py                    # 2 ms bursts every 4 ms
    .venv/bin/python scripts/bench_handoff.py --switch 0.0002     # a smaller switch interval
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import uvloop  # noqa: E402
from bench_latency import line  # noqa: E402

from segmentstore.storage.log_thread import LogThread  # noqa: E402


def busy(us: float) -> None:
    end = time.perf_counter() + us / 1e6
    while time.perf_counter() < end:
        pass


async def measure(fd: int, n: int, busy_us: float, gap: float, every: float) -> None:
    loop = asyncio.get_running_loop()
    log_thread = LogThread(loop, "log")
    running = True

    def burst() -> None:
        if running:
            busy(busy_us)
            loop.call_later(gap, burst)

    def job(submitted: float) -> tuple[float, float]:
        start = time.perf_counter()
        os.pwrite(fd, b"x" * 128, 0)
        return start - submitted, time.perf_counter()

    loop.call_soon(burst)
    ins: list[float] = []
    outs: list[float] = []
    for _ in range(n):
        waited, done = await log_thread.run(job, time.perf_counter())
        outs.append(time.perf_counter() - done)
        ins.append(waited)
        await asyncio.sleep(every)
    running = False
    log_thread.shutdown()
    for name, xs in (("in ", ins), ("out", outs)):
        print(line(name, sorted(xs)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=500)
    p.add_argument("--busy-us", type=float, default=2000.0)
    p.add_argument("--gap-ms", type=float, default=4.0)
    p.add_argument("--every-ms", type=float, default=0.37)
    p.add_argument("--switch", type=float, default=0.0, help="sys.setswitchinterval (0: 5 ms)")
    args = p.parse_args()
    if args.switch:
        sys.setswitchinterval(args.switch)
    print(
        f"load {os.getloadavg()[0]:.1f}, switch interval {sys.getswitchinterval() * 1e3:g} ms, "
        f"{args.busy_us:g} us of Python every {args.gap_ms:g} ms"
    )
    with tempfile.TemporaryDirectory(prefix="bench-handoff-") as d:
        fd = os.open(Path(d) / "log", os.O_RDWR | os.O_CREAT)
        try:
            uvloop.run(
                measure(fd, args.jobs, args.busy_us, args.gap_ms / 1000, args.every_ms / 1000)
            )
        finally:
            os.close(fd)


if __name__ == "__main__":
    main()
