"""What the event loop runs for one lone append (issue 19, round 10): counts, not timings.

Server side (``--side server``, the default): a real server (``Server.start``, uvloop,
fsync=always, real files) in this process and a blocking raw-socket client in a child
process sending one AppendBlockEnd at a time and waiting for its DataAppended. Over
``--events`` lone appends, ``sys.setprofile`` on the loop's thread records every Python
call and C call, and the script prints per append:

- loop callbacks: top-level Python calls uvloop makes (a socket read, a ready handle, a
  task step, the log thread's eventfd drain); between two of them uvloop releases the GIL;
- calls from the append being queued (``SegmentContainer.append`` returning) to the batch
  handed to the log thread (``SimpleQueue.put``), and the callbacks that took;
- calls on the loop after that put until the callback that made it ends (the GIL is held
  meanwhile, so the log thread cannot start);
- calls from the eventfd drain to the ack's transport write, and the callbacks that took;
- every Python call on the loop per append.

Client side (``--side client``): the SDK (``await (await writer.write(p))``, uvloop) in this
process against a server in a child process; the same profile on the client's thread gives
calls and loop callbacks per ``write()`` -> ack.

    .venv/bin/python scripts/bench_lone_path.py --side server --events 500
    .venv/bin/python scripts/bench_lone_path.py --side client --events 500

``--cpu`` runs the same events without the profiler and prints the loop thread's CPU time
per event (``time.thread_time``; server side also the other threads', the log thread's).

Run it from another checkout (``PYTHONPATH=<tree>:<tree>/client``) to count that code.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import uvloop

CLIENT = textwrap.dedent(
    """
    import asyncio, socket, struct, sys, uuid
    import segmentstore_client as sc
    from segmentstore_client.protocol import codec
    from segmentstore_client.protocol.commands_data import Hello, SetupAppend, AppendBlockEnd
    from segmentstore_client.protocol.events import frame_event

    port, n, seg = int(sys.argv[1]), int(sys.argv[2]), "s/lone/0"

    async def mk():
        c = await sc.connect(f"tcp://127.0.0.1:{port}")
        await c.create_segment(seg)
        await c.close()

    def recv(s, buf):
        while True:
            if len(buf) >= 8:
                ln = struct.unpack(">ii", buf[:8])[1]
                if len(buf) >= 8 + ln:
                    del buf[:8 + ln]
                    return
            d = s.recv(65536)
            if not d:
                raise EOFError
            buf += d

    asyncio.run(mk())
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray()
    s.sendall(codec.encode(Hello(high_version=15, low_version=5))); recv(s, buf)
    w = uuid.uuid4()
    s.sendall(codec.encode(SetupAppend(request_id=1, writer_id=w, segment=seg))); recv(s, buf)
    ev = frame_event(b"x" * 100)
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(1, n + 1):
        s.sendall(codec.encode(AppendBlockEnd(writer_id=w, size_of_whole_events=len(ev),
            data=ev, num_events=1, last_event_number=i, request_id=i)))
        recv(s, buf)
    s.close()
    """
)


# uvloop's run_until_complete is called from asyncio.Runner.run: a callback's Python frame
# has that frame (or none) as its f_back.
_BASE = asyncio.runners.Runner.run.__code__


def _top(frame: FrameType) -> bool:
    back = frame.f_back
    return back is None or back.f_code is _BASE


# The same lone events through the SDK, with a follow reader on its own connection (as
# scripts/bench_latency.py runs them): the reader's next read reaches the server around the
# time of the next append.
SDK_CLIENT = textwrap.dedent(
    """
    import asyncio, sys
    import segmentstore_client as sc

    port, n, seg = int(sys.argv[1]), int(sys.argv[2]), "s/lone/0"

    async def main():
        ep = f"tcp://127.0.0.1:{port}"
        async with sc.connect(ep) as c, sc.connect(ep) as tc:
            await c.create_segment(seg)
            reader = tc.reader(seg, follow=True)
            seen = []

            async def tail():
                async for _ in reader:
                    seen.append(1)
                    if len(seen) >= n:
                        return

            tailing = asyncio.ensure_future(tail())
            async with c.writer(seg) as w:
                await w.start()
                print("ready", flush=True)
                await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
                for _ in range(n):
                    await (await w.write(b"x" * 100))
            await asyncio.wait_for(tailing, 30)
            await reader.close()

    asyncio.run(main())
    """
)


class Trace:
    """Profile events of one thread: (kind, name, top-level) per event."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, bool]] = []

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            self.events.append(("call", code.co_qualname, _top(frame)))
        elif event == "c_call":
            self.events.append(("c_call", getattr(arg, "__qualname__", "?"), False))
        elif event == "return":
            self.events.append(("return", frame.f_code.co_qualname, _top(frame)))


def calls(events: list[tuple[str, str, bool]]) -> int:
    return sum(1 for k, _, _ in events if k != "return")


def py_calls(events: list[tuple[str, str, bool]]) -> int:
    return sum(1 for k, _, _ in events if k == "call")


def callbacks(events: list[tuple[str, str, bool]]) -> int:
    return sum(1 for k, _, top in events if k == "call" and top)


def analyse_server(ev: list[tuple[str, str, bool]], n: int) -> None:
    # Split at each append's socket read: the loop callback (top-level call) whose calls
    # include SegmentContainer.append.
    tops = [i for i, (k, _, top) in enumerate(ev) if k == "call" and top]
    starts = []
    for a, b in zip(tops, [*tops[1:], len(ev)], strict=True):
        if any(k == "call" and name == "SegmentContainer.append" for k, name, _ in ev[a:b]):
            starts.append(a)
    between: Counter[str] = Counter()
    rows: dict[str, list[int]] = {}
    skipped = 0
    for a, b in zip(starts, [*starts[1:], len(ev)], strict=True):
        seg = ev[a:b]
        try:
            queued = next(
                i
                for i, (k, name, _) in enumerate(seg)
                if k == "return" and name == "SegmentContainer.append"
            )
            put = next(
                i
                for i, (k, name, _) in enumerate(seg)
                if k == "c_call" and name == "SimpleQueue.put"
            )
            # the callback holding the put ends at the next top-level return after it
            cb_end = next(i for i in range(put, len(seg)) if seg[i][0] == "return" and seg[i][2])
            drain = next(
                i
                for i, (k, name, top) in enumerate(seg)
                if k == "call" and top and name == "LogThread._drain"
            )
            # uvloop's writelines is not a builtin the profiler sees: its caller marks it
            wrote = next(
                i
                for i in range(drain, len(seg))
                if seg[i][0] == "call" and seg[i][1] == "Connection._flush"
            )
        except StopIteration:
            skipped += 1  # the connection's last read (its end), or an append cut by the trace
            continue
        add = rows.setdefault
        others = [name for k, name, top in seg[put:drain] if k == "call" and top]
        between.update(others)
        add("callbacks between the put and the eventfd drain", []).append(len(others))
        add("loop callbacks per append", []).append(callbacks(seg))
        add("calls, append queued -> batch put to the log thread", []).append(
            calls(seg[queued:put])
        )
        add("callbacks started, append queued -> put", []).append(callbacks(seg[queued:put]))
        add("calls after the put, same callback (GIL held)", []).append(
            calls(seg[put + 1 : cb_end])
        )
        add("calls, eventfd drain -> ack written", []).append(calls(seg[drain:wrote]))
        add("callbacks, eventfd drain -> ack written", []).append(callbacks(seg[drain : wrote + 1]))
        add("Python + C calls on the loop per append", []).append(calls(seg))
        add("of which Python calls", []).append(py_calls(seg))
    print(f"{len(starts) - skipped} lone appends traced ({n} sent)")
    for name, xs in rows.items():
        xs.sort()
        print(f"  {name:<55} median {xs[len(xs) // 2]:5d}  min {xs[0]:5d}  max {xs[-1]:5d}")
    xs = rows["callbacks between the put and the eventfd drain"]
    print(
        f"  appends with other callbacks between the put and the drain: {sum(map(bool, xs)) / len(xs):.0%}"
    )
    if between:
        print(
            "  callbacks between the put and the drain:",
            ", ".join(f"{k} x{v}" for k, v in between.most_common(6)),
        )


async def server_side(n: int, sdk: bool) -> None:
    from segmentstore.config import ServerConfig
    from segmentstore.server.server import Server

    with tempfile.TemporaryDirectory(prefix="lone-path-") as d:
        config = ServerConfig(
            port=0, data_dir=Path(d), fsync="always", http_port=-1, log_level="WARNING"
        )
        server = await Server.start(config)
        port = server.address[1]
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            SDK_CLIENT if sdk else CLIENT,
            str(port),
            str(n),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert proc.stdout is not None and proc.stdin is not None
        assert (await proc.stdout.readline()).strip() == b"ready"
        trace = Trace()
        # the loop's own pipe to the child is idle from here on: only the append traffic
        if CPU:
            loop_cpu, all_cpu, wall = time.thread_time(), time.process_time(), time.perf_counter()
        else:
            sys.setprofile(trace)
        proc.stdin.write(b"go\n")
        await proc.wait()
        if CPU:
            loop_cpu = time.thread_time() - loop_cpu
            all_cpu = time.process_time() - all_cpu
            wall = time.perf_counter() - wall
            print(f"{n} lone appends, no profiler: {wall / n * 1e6:.0f} us each (wall)")
            print(f"  loop thread CPU per append          {loop_cpu / n * 1e6:6.1f} us")
            print(f"  other threads' CPU per append       {(all_cpu - loop_cpu) / n * 1e6:6.1f} us")
        else:
            sys.setprofile(None)
            analyse_server(trace.events[:], n)
        await server.shutdown()


async def client_side(n: int) -> None:
    import segmentstore_client as sc

    from segmentstore.server.launcher import ServerProcess

    with tempfile.TemporaryDirectory(prefix="lone-path-") as d:
        p = ServerProcess(Path(d), ["--fsync", "always"], http_port=-1)
        p.start()
        try:
            c = await sc.connect(p.endpoint)
            await c.create_segment("s/lone/0")
            w = c.writer("s/lone/0")
            await w.start()
            for _ in range(50):
                await (await w.write(b"x" * 100))
            if CPU:
                cpu, wall = time.thread_time(), time.perf_counter()
                for _ in range(n):
                    await (await w.write(b"x" * 100))
                cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
                print(f"{n} lone write() -> ack, no profiler: {wall / n * 1e6:.0f} us each (wall)")
                print(f"  the SDK's loop thread CPU per event  {cpu / n * 1e6:6.1f} us")
                await w.close()
                await c.close()
                return
            trace = Trace()
            marks: list[int] = []
            sys.setprofile(trace)
            for _ in range(n):
                marks.append(len(trace.events))
                await (await w.write(b"x" * 100))
            sys.setprofile(None)
            marks.append(len(trace.events))
            per = [trace.events[a:b] for a, b in itertools.pairwise(marks)]
            cs = sorted(calls(x) for x in per)
            cb = sorted(callbacks(x) for x in per)
            pc = sorted(py_calls(x) for x in per)
            print(f"{n} lone write() -> ack on the SDK's loop")
            print(f"  Python + C calls per event   median {cs[n // 2]}  min {cs[0]}  max {cs[-1]}")
            print(f"  of which Python calls        median {pc[n // 2]}  min {pc[0]}  max {pc[-1]}")
            print(f"  loop callbacks per event     median {cb[n // 2]}  min {cb[0]}  max {cb[-1]}")
            # the calls of one typical event, for reading
            typical = next(x for x in per if calls(x) == cs[n // 2])
            if VERBOSE:
                for k, name, top in typical:
                    if k != "return":
                        print("   ", "*" if top else " ", k, name)
            await w.close()
            await c.close()
        finally:
            p.stop()


VERBOSE = False
CPU = False


def main() -> None:
    global VERBOSE, CPU
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--side", choices=("server", "client"), default="server")
    p.add_argument("--events", type=int, default=500)
    p.add_argument(
        "--client",
        choices=("raw", "sdk"),
        default="raw",
        help="server side: a blocking raw socket, or the SDK with a follow reader (bench_latency's)",
    )
    p.add_argument("--verbose", action="store_true", help="list the calls of one typical event")
    p.add_argument(
        "--cpu",
        action="store_true",
        help="no profiler: the loop thread's CPU time per event (and the other threads')",
    )
    args = p.parse_args()
    VERBOSE = args.verbose
    CPU = args.cpu
    t = time.perf_counter()
    uvloop.run(
        server_side(args.events, args.client == "sdk")
        if args.side == "server"
        else client_side(args.events)
    )
    print(f"({time.perf_counter() - t:.1f} s)")


if __name__ == "__main__":
    main()
