#!/usr/bin/env python3
"""Streams through the gRPC controller, beside the raw segment path, from one server run.

Starts ``segmentstore serve`` with its controller on ephemeral ports, then measures:

* stream/1, stream/8   the official Pravega Python client (PyPI ``pravega``, in a child
                       process) writing 100 B events with routing keys through its
                       pipelined writer (``max_inflight_events``) to a stream of 1 and of 8
                       segments; one flush at the end
* segment/1, segment/8 the baseline, like with like: the same official client writing the
                       same 100 B pieces straight to 1 and to 8 raw segments, through one
                       byte-stream writer per segment written in turn (no controller on the
                       path, no routing, no event framing); stream/N is shown as a share
                       of segment/N
* sdk-segment          this project's SDK writing the same events to a plain segment with
                       its pipelined writer (the store's own ceiling for comparison)
* stream/8 wide        stream/8 again with ``--wide-inflight`` events in flight (default
                       8,000): the same server, only the client's in-flight cap differs
* createStream         1,000 ``create_stream`` calls of the official client (1 segment
                       each), one at a time: p50 / p99 / max latency

Where the time goes (``--explain``, on by default): the server's own counters around each
case, from ``/metrics``: append blocks received, events per block, the server's mean time
from receiving a block to sending its DataAppended, the mean fdatasync, and the mean time
between two blocks of one segment writer (the official writer keeps ONE block in flight per
segment and sends the next when the ack arrives, so that cycle bounds its rate). "server
share" is the server's part of that cycle; the rest is the network and the client. The
client's CPU (all its threads) is shown beside the server's. For the capped event writer,
Little's law: its ``max_inflight_events`` are always in the client's system, so each event
stays ``inflight / rate``; "server ack" is shown as a share of that stay.

The client's ceiling (``--ceiling``): every row again with the official client's data path
sent to a null data server (``scripts/null_server.py``: the wire protocol answered at once,
nothing stored), interleaved with the real rows, case by case. A second ``segmentstore
serve`` runs the controller the client asks; its ``--advertised-port`` is the null
server's, so ``getURI`` names the null server (the client's calls are unchanged, and the
controller is the real one rather than a copy of it). Every
null case checks that the null server counted the case's bytes and that the controller's
own store saw no append. ``--ack-delays 1,2,4`` adds the same rows against the null server
holding every reply that many ms (a server whose only cost is its ack latency; the loop's
timers are about 1 ms coarse, so the hold really given is printed). ``--null-impl
python|c|both`` picks the null server: the Python one ("null-py") or the same server in C
(``scripts/null_server.c``, compiled with ``cc -O2`` into a temporary directory at run
time, "null-c"), each behind its own controller; default both when ``cc`` is found. The
last table gives stream/N as a share of segment/N on each backend, and each null server's
stream/N as a share of the real server's segment/N: when that stays under 90 %, no server
can bring the client's event writer to 90 % of its byte writers on this server.

Each rate is the best of ``--repeat`` interleaved rounds (default 3; the machine is shared).
Every figure names the fsync mode. Usage::

    .venv/bin/python scripts/bench_streams.py                     # fsync=always, 200k events
    .venv/bin/python scripts/bench_streams.py --events 50000 --fsync interval
    .venv/bin/python scripts/bench_streams.py --ceiling --ack-delays 1,2,4   # ~3 min
    .venv/bin/python scripts/bench_streams.py --ceiling --null-impl both --events 200000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "client"))
sys.path.insert(0, str(ROOT))

import segmentstore_client as sc  # noqa: E402

from segmentstore.server.launcher import ServerProcess  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
from null_server import NullServerProcess, build_c_server, c_compiler  # noqa: E402

CONTROLLER = re.compile(r"controller on (tcp://[0-9.]+:\d+)")

# Runs in a child process: the official client's blocking calls hold the GIL.
CHILD = r"""
import json, sys, time
import pravega_client as pc
a = json.loads(sys.argv[1])
m = pc.StreamManager(a["uri"])
m.create_scope("bench")
def done(t0, c0):
    c = time.process_time() - c0
    print(json.dumps({"seconds": time.perf_counter() - t0, "cpu": c}), flush=True)
if a["op"] == "bytes":  # one byte stream (1 raw segment) per segment, written in turn
    n = a["segments"]
    names = [f"{a['stream']}-{k}" for k in range(n)]
    for s in names:
        m.create_stream("bench", s, 1)
    bss = [m.create_byte_stream("bench", s) for s in names]
    payload = b"x" * a["size"]
    for bs in bss:
        bs.write(payload); bs.flush()
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(a["events"]):
        bss[i % n].write(payload)
    for bs in bss:
        bs.flush()
    done(t0, c0)
elif a["op"] == "write":
    m.create_stream("bench", a["stream"], a["segments"])
    w = m.create_writer("bench", a["stream"], max_inflight_events=a["inflight"])
    payload = "x" * a["size"]
    keys = [f"key-{i}" for i in range(64)]
    for k in keys:  # every segment's connection set up
        w.write_event(payload, routing_key=k)
    w.flush()
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(a["events"]):
        w.write_event(payload, routing_key=keys[i % 64])
    w.flush()
    done(t0, c0)
else:
    lat = []
    for i in range(a["count"]):
        t0 = time.perf_counter()
        assert m.create_stream("bench", f"s{i}", 1)
        lat.append(time.perf_counter() - t0)
    print(json.dumps({"latencies": lat}), flush=True)
import os; os._exit(0)
"""


def child(args: dict[str, object]) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(args)], capture_output=True, text=True, timeout=900
    )
    if proc.returncode != 0:
        raise SystemExit(f"official client failed: {proc.stderr[-2000:]}")
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


async def segment_path(endpoint: str, name: str, events: int, size: int) -> float:
    payload = b"x" * size
    async with sc.connect(endpoint) as client:
        await client.create_segment(name)
        async with client.writer(name) as w:
            await w.start()
            await w.write(payload)
            await w.flush()
            t0 = time.perf_counter()
            for _ in range(events):
                await w.write(payload)
            await w.flush()
            return time.perf_counter() - t0


# The server's counters read around each case (``--explain``).
_SAMPLES = {
    "blocks": "segmentstore_appends_total",
    "events": "segmentstore_events_total",
    "ack_sum": "segmentstore_append_latency_seconds_sum",
    "ack_count": "segmentstore_append_latency_seconds_count",
    "fsync_sum": 'segmentstore_commit_stage_seconds_sum{stage="fdatasync"}',
    "commits": 'segmentstore_commit_stage_seconds_count{stage="fdatasync"}',
    **{
        st: f'segmentstore_commit_stage_seconds_sum{{stage="{st}"}}'
        for st in ("handoff_in", "handoff_out", "apply")
    },
    "reads": "segmentstore_reads_total",  # a byte stream's prefetching reader
    "read_bytes": "segmentstore_read_bytes_total",
}


def metrics(server: ServerProcess) -> dict[str, float]:
    """Every sample of the server's ``/metrics``, by its full name with labels."""
    url = f"http://127.0.0.1:{server.http_port}/metrics"
    with urllib.request.urlopen(url, timeout=30) as r:
        lines = r.read().decode().splitlines()
    values: dict[str, float] = {}
    for line in lines:
        if not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


def scrape(server: ServerProcess) -> dict[str, float]:
    values = metrics(server)
    stat = Path(f"/proc/{server.pid}/stat").read_text().rsplit(")", 1)[1].split()
    values["cpu"] = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
    return {k: values.get(v, 0.0) for k, v in {**_SAMPLES, "cpu": "cpu"}.items()}


# Where a slow createStream's time went, from the server's histograms around the run:
# (label, count family, bucket sample at the edge shown).
_SLOW = (
    (
        "server createStream > 20 ms",
        'segmentstore_controller_rpc_seconds_count{method="createStream"}',
        'segmentstore_controller_rpc_seconds_bucket{le="0.02",method="createStream"}',
    ),
    (
        "fdatasync > 10 ms",
        'segmentstore_commit_stage_seconds_count{stage="fdatasync"}',
        'segmentstore_commit_stage_seconds_bucket{le="0.01",stage="fdatasync"}',
    ),
    (
        "log-thread hand-off in > 10 ms",
        'segmentstore_commit_stage_seconds_count{stage="handoff_in"}',
        'segmentstore_commit_stage_seconds_bucket{le="0.01",stage="handoff_in"}',
    ),
)


def slow_share(before: dict[str, float], after: dict[str, float]) -> str:
    """``k of n`` for each line of ``_SLOW`` between two scrapes."""
    out = []
    for label, count, edge in _SLOW:
        n = after.get(count, 0.0) - before.get(count, 0.0)
        fast = after.get(edge, 0.0) - before.get(edge, 0.0)
        out.append(f"{label}: {n - fast:,.0f} of {n:,.0f}")
    return "; ".join(out)


@dataclass
class Case:
    rate: float = 0.0
    seconds: float = 0.0
    client_cpu: float = 0.0
    inflight: int = 0  # the official writer's max_inflight_events (0: a byte writer, no cap)
    delta: dict[str, float] = field(default_factory=dict)

    def explain(self, segments: int, events: int) -> str:
        d = self.delta
        blocks = d.get("blocks", 0.0)
        if not blocks:
            return ""
        if "ack_sum" not in d:  # the null server: no ack time, no commits
            return (
                f"{blocks:>7,.0f} blocks, {events / blocks:5.1f} ev/block, "
                + (f"replies held {d['held_us'] / d['held'] / 1e3:4.2f} ms, " if d.get("held") else "")
                + f"cycle {self.seconds * segments / blocks * 1e3:5.2f} ms, "
                f"CPU null server {d['cpu'] / self.seconds:4.0%} client {self.client_cpu / self.seconds:4.0%}"
                + (f", event in client {self.inflight / self.rate * 1e3:4.2f} ms" if self.inflight else "")
            )  # fmt: skip
        ack = d["ack_sum"] / max(d["ack_count"], 1.0)
        fsync = d["fsync_sum"] / max(d["commits"], 1.0)
        commit_ms = 1e3 / max(d["commits"], 1.0)  # a stage's sum -> its mean per commit, ms
        cycle = self.seconds * segments / blocks
        return (
            f"{blocks:>7,.0f} blocks, {events / blocks:5.1f} ev/block, "
            f"{blocks / max(d['commits'], 1.0):4.1f} blocks/commit, "
            f"server ack {ack * 1e3:5.2f} ms (fdatasync {fsync * 1e3:4.2f} ms, "
            f"hand-offs in/out {d['handoff_in'] * commit_ms:4.2f}/{d['handoff_out'] * commit_ms:4.2f} ms, "
            f"apply {d['apply'] * commit_ms:4.2f} ms, "
            f"a commit every {self.seconds / max(d['commits'], 1.0) * 1e3:4.2f} ms), "
            f"cycle {cycle * 1e3:5.2f} ms, server share {ack / cycle:4.0%}, "
            f"CPU server {d['cpu'] / self.seconds:4.0%} client {self.client_cpu / self.seconds:4.0%}"
            + self.little(ack)
        )

    def reads(self) -> str:
        d = self.delta
        if not d.get("reads"):
            return ""
        return f", {d['reads']:,.0f} reads ({d['read_bytes'] / 2**20:,.1f} MiB)"

    def at_floor(self, segments: int) -> float:
        """The rate projected for a server whose ack took one bare fdatasync (the least an
        fsync=always ack can take), the same blocks and the same client time per cycle."""
        d = self.delta
        blocks = d.get("blocks", 0.0)
        if not blocks or not self.inflight or "ack_sum" not in d:
            return 0.0
        ack = d["ack_sum"] / max(d["ack_count"], 1.0)
        fsync = d["fsync_sum"] / max(d["commits"], 1.0)
        cycle = self.seconds * segments / blocks
        return self.rate * cycle / (cycle - ack + fsync)

    def little(self, ack: float) -> str:
        """Little's law for a capped writer: its ``inflight`` events are always in the client's
        system, so each stays ``inflight / rate`` seconds; the server's ack is that share."""
        if not self.inflight:
            return ""
        stay = self.inflight / self.rate
        return f", event in client {stay * 1e3:4.2f} ms (server ack {ack / stay:4.0%} of it)"


@dataclass
class Backend:
    """Where a row's data path goes: ``label`` "real" is the real server, "null-py" / "null-c"
    a null data server (``scripts/null_server.py`` / ``.c``) behind a real controller, "null-c+Xms" the same
    with every reply held X ms; ``sample`` reads its counters (the keys of ``_SAMPLES`` it
    has, plus "bytes" for the null server); ``prepare`` runs before each case."""

    label: str
    uri: str
    sample: Callable[[], dict[str, float]]
    prepare: Callable[[], None] = lambda: None


def null_backends(
    fsync: str, data: Path, delays_ms: list[float], binary: Path | None = None
) -> tuple[list[Backend], ServerProcess, NullServerProcess]:
    """The null server (the Python one, or the C one built at ``binary``), and a real
    ``segmentstore serve`` for the controller whose ``getURI`` hands out the null server's
    port (``--advertised-port``): the official client asks the real controller and sends
    its data to the null server. One backend per ack delay (0 first), all on the same null
    server (the delay is set before each case); labels "null-py", "null-c+2ms", ..."""
    null = NullServerProcess(binary=binary).start()
    tag = "null-py" if binary is None else "null-c"
    args = ["--controller-port", "0", "--fsync", fsync, "--advertised-port", str(null.port)]
    ctl = ServerProcess(data, args)
    try:
        ctl.start()
        m = next(filter(None, (CONTROLLER.search(line) for line in ctl.log)), None)
        if m is None:
            raise SystemExit("the null run's server did not start its controller")
    except BaseException:
        ctl.kill()
        null.stop()
        raise

    def sample() -> dict[str, float]:
        c = null.stats()
        if scrape(ctl)["blocks"]:  # the data path must not reach the real store
            raise SystemExit("appends reached the controller's own store, not the null server")
        blocks = c.get("blocks", 0) + c.get("conditional_blocks", 0)
        return {"blocks": blocks, "events": c.get("events", 0), "bytes": c.get("bytes", 0),
                "reads": c.get("ReadSegment", 0), "read_bytes": 0, "cpu": null.cpu(),
                "held": c.get("held_batches", 0), "held_us": c.get("held_us", 0)}  # fmt: skip

    def backend(ms: float) -> Backend:
        label = f"{tag}+{ms:g}ms" if ms else tag
        return Backend(label, m.group(1), sample, lambda: null.delay(ms / 1000))

    return [backend(ms) for ms in [0.0, *delays_ms]], ctl, null


def run_rows(a: argparse.Namespace, backends: list[Backend], endpoint: str) -> dict[str, Case]:
    """Every row on every backend, interleaved (row by row, backend by backend) in each
    round; each case (``"<row> <backend>"``) keeps its best round."""
    cases: dict[str, Case] = {}
    for n in range(a.repeat):
        for name, _segs, job in plan(a):
            for b in backends:
                b.prepare()
                before = b.sample()
                label = f"{name} {b.label}"
                stream = f"{re.sub('[^A-Za-z0-9]+', '-', label)}-{n}"  # Pravega's name rule
                r = child({**job, "uri": b.uri, "stream": stream, "events": a.events, "size": a.size})  # fmt: skip
                after = b.sample()
                if "bytes" in after and after["bytes"] - before["bytes"] < a.events * a.size:
                    raise SystemExit(f"{label}: the null server did not see the events")
                seconds = float(r["seconds"])  # type: ignore[arg-type]
                best = cases.setdefault(label, Case())
                if a.events / seconds > best.rate:
                    best.rate, best.seconds = a.events / seconds, seconds
                    best.client_cpu = float(r["cpu"])  # type: ignore[arg-type]
                    best.inflight = int(job.get("inflight", 0))  # type: ignore[call-overload]
                    best.delta = {k: after[k] - before[k] for k in after}
        if not a.ceiling:
            seconds = asyncio.run(segment_path(endpoint, f"sdk-{n}", a.events, a.size))
            best = cases.setdefault("sdk-segment real", Case())
            best.rate = max(best.rate, a.events / seconds)
    return cases


def plan(a: argparse.Namespace) -> list[tuple[str, int, dict[str, object]]]:
    rows: list[tuple[str, int, dict[str, object]]] = []
    for segs in (1, 8):  # like with like: the same client, the same segment count
        rows.append((f"stream/{segs}", segs, {"op": "write", "segments": segs, "inflight": a.inflight}))  # fmt: skip
        rows.append((f"segment/{segs}", segs, {"op": "bytes", "segments": segs}))
    rows.append(("stream/8 wide", 8, {"op": "write", "segments": 8, "inflight": a.wide_inflight}))  # fmt: skip
    return rows


def report(a: argparse.Namespace, backends: list[str], cases: dict[str, Case]) -> None:
    """One line per row and backend; with more than one backend, the shares stream/N of
    segment/N on each backend and against the real server's segment/N."""
    rows = [(name, segs) for name, segs, _ in plan(a)]
    for name, segs in [*rows, ("sdk-segment", 1)]:
        for b in backends:
            case = cases.get(f"{name} {b}")
            if case is None:
                continue
            base = cases[f"segment/{segs} {b}"]
            line = f"  {name + ' ' + b:<26} {case.rate:>9,.0f} events/s {case.rate / base.rate:6.1%} of segment/{segs}"  # fmt: skip
            if not a.no_explain and name != "sdk-segment":
                line += "  " + case.explain(segs, a.events) + case.reads()
                floor = case.at_floor(segs)
                if floor:
                    line += f"; at a one-fdatasync ack {floor:,.0f} events/s ({floor / base.rate:.0%})"  # fmt: skip
            print(line)
    if len(backends) == 1:
        return
    nulls = [b for b in backends if b.startswith("null") and "+" not in b]
    print(f"  stream/N as a share of segment/N (fsync={a.fsync} for 'real'):")
    print("    " + " " * 14 + "".join(f"{b:>14}" for b in backends) + "".join(f"{b + ' of real':>19}" for b in nulls))  # fmt: skip
    for name, segs in rows:
        if name.startswith("stream"):
            bases = [cases[f"segment/{segs} {b}"].rate for b in backends]
            shares = [cases[f"{name} {b}"].rate / r for b, r in zip(backends, bases, strict=True)]
            ceilings = [cases[f"{name} {b}"].rate / bases[0] for b in nulls]
            print(f"    {name:<14}" + "".join(f"{x:>14.1%}" for x in shares) + "".join(f"{x:>19.1%}" for x in ceilings))  # fmt: skip


def create_streams(a: argparse.Namespace, server: ServerProcess, uri: str) -> None:
    load0, before = os.getloadavg()[0], metrics(server)
    r = child({"op": "create", "uri": uri, "count": a.streams})
    load1, after = os.getloadavg()[0], metrics(server)
    lat = sorted(float(x) * 1000 for x in r["latencies"])  # type: ignore[attr-defined]
    p50, p99 = lat[len(lat) // 2], lat[int(len(lat) * 0.99) - 1]
    over = sum(1 for x in lat if x > 20)
    print(
        f"  createStream x{a.streams} (fsync={a.fsync}, load average {load0:.1f}-{load1:.1f}): "
        f"p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {lat[-1]:.2f} ms; "
        f"client saw {over} over 20 ms\n    {slow_share(before, after)}"
    )


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--events", type=int, default=200_000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument(
        "--inflight", type=int, default=1000, help="official writer's max_inflight_events"
    )
    p.add_argument(
        "--wide-inflight", type=int, default=8000, help="max_inflight_events of 'stream/8 wide'"
    )
    p.add_argument("--streams", type=int, default=1000, help="createStream calls to time")
    p.add_argument("--repeat", type=int, default=3, help="rounds; the best rate of each is shown")
    p.add_argument("--fsync", default="always", choices=("always", "interval", "never"))
    p.add_argument("--no-explain", action="store_true", help="skip the server-side columns")
    p.add_argument("--only-create", action="store_true", help="time createStream only")
    p.add_argument(
        "--ceiling",
        action="store_true",
        help="every row also against the null data server, interleaved (no createStream)",
    )
    p.add_argument(
        "--ack-delays",
        type=lambda v: [float(x) for x in v.split(",") if x],
        default=[],
        help="with --ceiling: also against the null server holding every reply this many "
        "ms, comma-separated (e.g. 0.5,1,2)",
    )
    p.add_argument(
        "--null-impl",
        choices=("python", "c", "both"),
        help="with --ceiling: which null server (scripts/null_server.py, null_server.c built "
        "with cc -O2 at run time, or both interleaved); default both when cc is found",
    )
    a = p.parse_args()
    if a.null_impl is None:
        a.null_impl = "both" if c_compiler() else "python"
        if a.ceiling and a.null_impl == "python":
            print("no C compiler (cc) found: the ceiling uses the Python null server only")
    with tempfile.TemporaryDirectory() as data:
        server = ServerProcess(Path(data, "real"), ["--controller-port", "0", "--fsync", a.fsync])
        server.start()
        extra: list[ServerProcess | NullServerProcess] = []
        try:
            m = next(filter(None, (CONTROLLER.search(line) for line in server.log)), None)
            if m is None:
                raise SystemExit("server did not start its controller")
            backends = [Backend("real", m.group(1), lambda: scrape(server))]
            for impl in ("python", "c") if a.ceiling else ():
                if a.null_impl not in (impl, "both"):
                    continue
                try:
                    binary = None if impl == "python" else build_c_server(Path(data))
                except RuntimeError as e:
                    raise SystemExit(f"bench_streams: {e}") from None
                where = Path(data, f"null-{impl}")
                nulls, ctl, null = null_backends(a.fsync, where, a.ack_delays, binary)
                extra += [ctl, null]
                backends += nulls
            if not a.only_create:
                print(
                    f"best of {a.repeat} rounds, fsync={a.fsync}, {a.events} events of {a.size} B, "
                    f"official writer max_inflight_events={a.inflight} ('wide': {a.wide_inflight}), "
                    f"load average {os.getloadavg()[0]:.1f}"
                )
                report(a, [b.label for b in backends], run_rows(a, backends, server.endpoint))
            if not a.ceiling:
                create_streams(a, server, backends[0].uri)
        finally:
            for proc in (server, *extra):
                proc.kill() if isinstance(proc, ServerProcess) else proc.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
