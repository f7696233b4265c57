#!/usr/bin/env python3
"""End-to-end benchmark of the segment store server over loopback TCP.

Starts its own ``segmentstore serve`` subprocess (127.0.0.1, ephemeral port, temp data dir)
per fsync mode and drives it from an asyncio (uvloop) raw-socket client with pre-built,
pipelined AppendBlockEnd frames. Measures, in one run:

* appends: events/s, MB/s and ack latency p50/p99 for 100 B, 1 KiB and 64 KiB events, to one
  segment (one writer, one connection) and to 100 segments (100 writers on 4 connections),
  with fsync=always (the default: acked after fdatasync) and fsync=interval / fsync=never
  (labelled: acks come before the disk has the data);
* catch-up reads: MB/s reading a large segment from offset 0 (2 MiB ReadSegments, pipelined
  and one at a time);
* tail latency (fsync=never): an event is appended while a reader has a ReadSegment parked
  at the tail; p50/p99 of append sent -> reader has it, and of writer's ack -> reader has it;
* the comparison limits, measured in the same run: the disk's rate for 1 MiB writes each
  followed by fdatasync (in the data dir's filesystem), its rate for data going into blocks
  never written before (4 MiB O_DIRECT writes extending a new file: where chunk files, and
  anything a store keeps, must end up), what a plain uvloop socket pair
  moves over loopback (a trivial server in another process that discards, or sends), and
  the "python floor": what a trivial, protocol-free uvloop server moves from a socket into a
  preallocated file (one writer thread, pwritev of what has accumulated, fdatasync after
  each batch or none), with 64 KiB-event-sized blocks;
* catch-up reads again after a restart of the server (cold: its read cache is empty);
* each server is warmed up before its runs (``warm_up``: a read cache's worth of data is
  written and deleted), so every run sees the steady state of a long-running server;
* the ratios against the targets, and the CPU used by the server and by this client (if
  the client is near 100% of a core, it may be the bottleneck: the report says so).

``--profile FILE`` runs the server under cProfile for a short mixed workload and prints the
top functions. Example::

    .venv/bin/python scripts/bench_server.py --quick
    .venv/bin/python scripts/bench_server.py --json bench.json
    .venv/bin/python scripts/bench_server.py --quick --modes never --sizes 65536

On a VM with free page reporting (e.g. Firecracker), every 4 KiB page of new page cache or
anonymous memory costs a host page fault: the disk's "preallocated" reference and the
python floor's file rewrite pages already cached, as the server's preallocated log does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench_server_limits import (
    _floor_server,
    _loopback_server,
    disk_rate,
    loopback_rate,
    python_floor,
)
from bench_server_wire import (
    TARGETS,
    ServerProc,
    append_run,
    fill_segment,
    read_run,
    tail_run,
    use_uvloop,
    warm_up,
)

# --- driver ---------------------------------------------------------------------------------


def fmt_append(r: dict[str, Any]) -> str:
    return (
        f"  {r['event_bytes']:>6} B x{r['events_per_block']:>3}/block  {r['segments']:>3} seg "
        f"{r['connections']} conn {r['blocks_in_flight']:>3} in flight  {r['events_per_s']:>11,.0f} ev/s {r['mb_per_s']:>8.1f} MB/s  "
        f"ack p50 {r['ack_p50_ms']:6.2f} ms p99 {r['ack_p99_ms']:7.2f} ms  "
        f"cpu server {r['server_cpu']:4.0%} client {r['client_cpu']:4.0%} "
        f"others {r['others_cpu']:4.0%}"
    )


async def run_all(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    results: dict[str, Any] = {"python": sys.version.split()[0], "cpus": os.cpu_count()}
    duration = 1.0 if args.quick else args.duration
    warmup = 0.3 if args.quick else 1.0

    print("limits")
    disk = disk_rate(base, 1.0 if args.quick else 3.0)
    results["disk_1mib_fdatasync_mb_per_s"] = disk
    print(
        f"  disk, 1 MiB write + fdatasync: preallocated {disk['preallocated']:.0f} MB/s, growing file {disk['growing']:.0f} MB/s"
    )
    # A store writes each appended byte twice: once into the log (recycled, written-before
    # blocks; one fdatasync per group commit) and once into a chunk file (new blocks). If
    # the disk does one after the other, appends cannot outrun this.
    both = 1 / (1 / disk["preallocated"] + 1 / disk["new_blocks"])
    disk["log_plus_chunk"] = both
    print(
        f"  disk, new blocks (4 MiB O_DIRECT, a new file): {disk['new_blocks']:.0f} MB/s; "
        f"log + chunk file for each byte, one after the other: {both:.0f} MB/s"
    )
    # Even if both writes went to written-before blocks and overlapped perfectly, each byte
    # twice cannot pass half of what two streams move together.
    twice = disk["preallocated_2_streams"] / 2
    disk["twice_best_case"] = twice
    print(
        f"  disk, two 1 MiB + fdatasync streams at once (preallocated files): "
        f"{disk['preallocated_2_streams']:.0f} MB/s; each byte written twice, at best: "
        f"{twice:.0f} MB/s = {twice / disk['preallocated']:.0%} of one stream"
    )
    lo = await loopback_rate(1.0 if args.quick else 3.0)
    results["loopback_mb_per_s"] = lo
    print(
        f"  loopback uvloop socket: client->server {lo['client_to_server']:.0f} MB/s, server->client {lo['server_to_client']:.0f} MB/s"
    )
    floor = await python_floor(base, duration, warmup, args.inflight_mb << 20, args.depth)
    results["python_floor_mb_per_s"] = floor
    print(
        f"  python floor (socket -> preallocated file, no protocol): fsync=always {floor['always']:.0f} MB/s, never {floor['never']:.0f} MB/s"
    )

    appends: list[dict[str, Any]] = []
    results["appends"] = appends
    modes = args.modes or (["always", "never"] if args.quick else ["always", "interval", "never"])
    for mode in modes:
        data_dir = Path(tempfile.mkdtemp(prefix=f"server-{mode}-", dir=base))
        server = ServerProc(data_dir, mode)
        label = "" if mode == "always" else "  (acks before fdatasync: not durable on power loss)"
        print(f"\nappends, fsync={mode}{label}")
        try:
            await warm_up(server)
            print(f"  (warmed up first: {server.cache_mb} MiB, the server's read cache size)")
            for size in args.sizes:
                for segments, connections in ((1, 1), (100, 4)):
                    r = await append_run(
                        server,
                        size,
                        segments,
                        connections,
                        args.depth,
                        duration,
                        warmup,
                        inflight_bytes=args.inflight_mb << 20,
                    )
                    r["fsync"] = mode
                    appends.append(r)
                    print(fmt_append(r))
            # Round trip of one small append with nothing else going on (the official
            # client's pattern: one block in flight per writer).
            r = await append_run(server, 100, 1, 1, 1, duration, warmup, events_per_block=1)
            r["fsync"] = mode
            r["kind"] = "one event in flight"
            appends.append(r)
            print(fmt_append(r) + "  <- 1 event per block, 1 in flight")
            if mode == "never":
                name = f"catchup{uuid.uuid4().hex[:8]}/st/0.#epoch.0"
                total = (128 if args.quick else args.read_mb) * 1024 * 1024
                await fill_segment(server, name, total)
                print(f"\ncatch-up reads of a {total >> 20} MiB segment (fsync=never server)")
                reads: list[dict[str, Any]] = []
                for inflight in (8, 1):
                    r = await read_run(server, name, total, inflight)
                    reads.append(r)
                    print(
                        f"  {inflight} x 2 MiB reads in flight: {r['mb_per_s']:.0f} MB/s  "
                        f"cpu server {r['server_cpu']:.0%} client {r['client_cpu']:.0%} "
                        f"others {r['others_cpu']:.0%}"
                    )
                results["catchup_reads"] = reads
                # The same segment after a restart: the new server's read cache is empty,
                # so the reads come from the chunk files (through the OS page cache).
                code = server.stop()
                if code != 0:
                    print(f"  (server exited with {code})")
                t0 = time.perf_counter()
                server = ServerProc(data_dir, mode)
                restart = time.perf_counter() - t0
                r = await read_run(server, name, total, 8)
                r["restart_s"] = restart
                results["catchup_reads_cold"] = r
                print(
                    f"  after a restart (cold: from chunk files, not the read cache), 8 x 2 MiB in flight: {r['mb_per_s']:.0f} MB/s  "
                    f"cpu server {r['server_cpu']:.0%} client {r['client_cpu']:.0%} "
                    f"others {r['others_cpu']:.0%}  (restart took {restart:.1f} s)"
                )
                r = await tail_run(server, 300 if args.quick else 2000)
                results["tail_latency"] = r
                print(
                    f"\ntail latency, fsync=never ({r['events']} events of 100 B, one at a time):\n"
                    f"  append sent -> tail reader has it: p50 {r['e2e_p50_ms']:.3f} ms, p99 {r['e2e_p99_ms']:.3f} ms\n"
                    f"  writer's ack -> tail reader has it: p50 {r['after_ack_p50_ms']:.3f} ms, "
                    f"p99 {r['after_ack_p99_ms']:.3f} ms"
                )
        finally:
            code = server.stop()
            if code != 0:
                print(f"  (server exited with {code})")
            shutil.rmtree(data_dir, ignore_errors=True)

    # Ratios against the targets (those whose runs were skipped are left out).
    def find(mode: str, size: int, segments: int) -> dict[str, Any] | None:
        return next(
            (
                r
                for r in appends
                if (r["fsync"], r["event_bytes"], r["segments"]) == (mode, size, segments)
                and "kind" not in r
            ),
            None,
        )

    a100 = find("always", 100, 1)
    a64 = find("always", 65536, 1)
    n64 = find("never", 65536, 1)
    reads = results.get("catchup_reads", [])
    cold: dict[str, Any] | None = results.get("catchup_reads_cold")
    tail: dict[str, Any] | None = results.get("tail_latency")
    ratios: dict[str, float] = {}
    lines: list[str] = []
    skipped: list[str] = []
    if a100 is not None:
        ratios["events_100b_fsync_always_per_s"] = (
            a100["events_per_s"] / TARGETS["events_100b_fsync_always_per_s"]
        )
        lines.append(
            f"  100 B, 1 conn, fsync=always: {a100['events_per_s']:,.0f} ev/s vs 500,000: {ratios['events_100b_fsync_always_per_s']:.2f}"
        )
    else:
        skipped.append("100 B fsync=always")
    for mode, row, key, ref, ref_name in (
        ("always", a64, "append_64k_fsync_always_vs_disk", disk["preallocated"], "disk"),
        ("never", n64, "append_64k_fsync_never_vs_loopback", lo["client_to_server"], "loopback"),
    ):
        if row is None:
            skipped.append(f"64 KiB fsync={mode}")
            continue
        share = row["mb_per_s"] / ref
        ratios[key] = share / TARGETS[key]
        lines.append(
            f"  64 KiB fsync={mode}: {row['mb_per_s']:.0f} MB/s = {share:.0%} of {ref_name} "
            f"(target {TARGETS[key]:.0%}): {ratios[key]:.2f}"
        )
        lines.append(
            f"   (= {row['mb_per_s'] / floor[mode]:.0%} of the python floor for the same mode; "
            f"{row['mb_per_s'] / disk['new_blocks']:.0%} of the disk's new-block rate"
            + (
                f", {row['mb_per_s'] / disk['log_plus_chunk']:.0%} of log + chunk; writing each "
                f"byte twice allows at most {disk['twice_best_case'] / ref:.0%} of {ref_name})"
                if mode == "always"
                else ")"
            )
        )
    if reads:
        best_read = max(reads, key=lambda r: r["mb_per_s"])
        ratios["catchup_read_vs_loopback"] = (
            best_read["mb_per_s"] / lo["server_to_client"] / TARGETS["catchup_read_vs_loopback"]
        )
        lines.append(
            f"  catch-up reads: {best_read['mb_per_s']:.0f} MB/s ({best_read['reads_in_flight']} in flight) = {best_read['mb_per_s'] / lo['server_to_client']:.0%} of loopback (target 50%): {ratios['catchup_read_vs_loopback']:.2f}"
        )
    else:
        skipped.append("catch-up reads")
    if cold is not None:
        lines.append(
            f"   (after a restart, cold: {cold['mb_per_s']:.0f} MB/s = {cold['mb_per_s'] / lo['server_to_client']:.0%} of loopback; informational, the target uses the warm runs)"
        )
    if tail is not None:
        ratios["tail_latency_p99_ms"] = TARGETS["tail_latency_p99_ms"] / tail["e2e_p99_ms"]
        lines.append(
            f"  tail latency p99 (fsync=never): {tail['e2e_p99_ms']:.3f} ms (target < 2 ms): {ratios['tail_latency_p99_ms']:.2f}"
        )
    else:
        skipped.append("tail latency")
    results["targets"] = TARGETS
    results["target_ratios"] = ratios
    print("\nagainst the targets (>= 1.00 means met)")
    print("\n".join(lines))
    if skipped:
        print(f"  (not run, so not compared: {', '.join(skipped)})")
    noisy = [r for r in [*appends, *reads, *([cold] if cold else [])] if r["others_cpu"] > 0.25]
    if noisy:
        print(
            f"\nnote: other processes used > 25% of a core during {len(noisy)} run(s) "
            "(column 'others'): those figures are low by an unknown amount."
        )
    busy = [r for r in appends if r["client_cpu"] > 0.85]
    if busy:
        print(
            f"\nnote: the client used > 85% of a core in {len(busy)} append run(s); there the "
            "client may be the bottleneck (server CPU is shown next to it)."
        )
    return results


async def profile(args: argparse.Namespace, base: Path) -> None:
    """Run a short mixed workload against one server under cProfile (Python functions of
    the event-loop thread) and, with ``--perf``, under ``perf record`` too (C code, kernel,
    every thread: copies, syscalls, crc), then print the top entries of each."""
    out = Path(args.profile).resolve()
    data_dir = Path(tempfile.mkdtemp(prefix="server-profile-", dir=base))
    server = ServerProc(data_dir, args.profile_fsync, profile=out)
    perf: subprocess.Popen[bytes] | None = None
    perf_data = out.with_suffix(".perf.data")
    if args.perf:
        perf = subprocess.Popen(
            ["perf", "record", "-F", "999", "-g", "-o", str(perf_data), "-p", str(server.proc.pid)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    try:
        for size in (100, 64 * 1024):
            r = await append_run(
                server,
                size,
                1,
                1,
                args.depth,
                args.duration,
                0.5,
                inflight_bytes=args.inflight_mb << 20,
            )
            print(fmt_append(r))
        name = f"catchup{uuid.uuid4().hex[:8]}/st/0.#epoch.0"
        await fill_segment(server, name, 64 << 20)
        r = await read_run(server, name, 64 << 20, 8)
        print(f"  reads: {r['mb_per_s']:.0f} MB/s")
    finally:
        if perf is not None:
            perf.send_signal(signal.SIGINT)
            perf.wait(60)
        server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    import pstats

    stats = pstats.Stats(str(out))
    stats.sort_stats("tottime").print_stats(args.profile_top)
    if perf is not None:
        report = subprocess.run(
            [
                *("perf", "report", "-i", str(perf_data), "--no-children", "--sort", "dso,sym"),
                *("--stdio", "-g", "none", "--percent-limit", "0.5"),
            ],
            capture_output=True,
            text=True,
        )
        lines = [ln for ln in report.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
        print("perf, whole server process (all threads), by symbol:")
        print("\n".join(lines[: args.profile_top]))


def int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of integers: {text!r}"
        ) from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"need positive sizes: {text!r}")
    return values


def mode_list(text: str) -> list[str]:
    values = [x.strip() for x in text.split(",") if x.strip()]
    bad = [v for v in values if v not in ("always", "interval", "never")]
    if not values or bad:
        raise argparse.ArgumentTypeError(f"modes are always, interval, never: {text!r}")
    return values


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="short runs, fsync always and never only")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON ('-' = stdout)")
    p.add_argument("--duration", type=float, default=3.0, help="seconds measured per append run")
    p.add_argument("--depth", type=int, default=64, help="most blocks in flight per connection")
    p.add_argument(
        "--inflight-mb",
        type=int,
        default=8,
        help="and at most this many MiB in flight per connection",
    )
    p.add_argument("--read-mb", type=int, default=512, help="size of the catch-up read segment")
    p.add_argument("--dir", type=Path, help="where the data dirs go (default: system temp)")
    p.add_argument("--profile", metavar="FILE", help="run the server under cProfile, print top")
    p.add_argument("--profile-fsync", default="always", choices=("always", "interval", "never"))
    p.add_argument("--profile-top", type=int, default=30)
    p.add_argument("--perf", action="store_true", help="with --profile: also perf record")
    p.add_argument(
        "--sizes",
        type=int_list,
        default=[100, 1024, 64 * 1024],
        help="comma-separated event sizes of the append runs (default: 100,1024,65536)",
    )
    p.add_argument(
        "--modes",
        type=mode_list,
        help="comma-separated fsync modes (default: always,interval,never; always,never with "
        "--quick); catch-up reads and tail latency run only with 'never'",
    )
    p.add_argument("--loopback-server", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--floor-server", choices=("always", "never"), help=argparse.SUPPRESS)
    p.add_argument("--floor-file", help=argparse.SUPPRESS)
    args = p.parse_args()
    use_uvloop()
    if args.loopback_server:
        asyncio.run(_loopback_server())
        return 0
    if args.floor_server:
        asyncio.run(_floor_server(args.floor_file, args.floor_server))
        return 0
    base = Path(tempfile.mkdtemp(prefix="bench-server-", dir=args.dir))
    try:
        if args.profile:
            asyncio.run(profile(args, base))
            return 0
        results = asyncio.run(run_all(args, base))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if args.json:
        text = json.dumps(results, indent=2)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
