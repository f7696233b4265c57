#!/usr/bin/env python3
"""TLS + auth against plain TCP in the same run: 100 B ``write_many`` and catch-up reads.

Starts two servers with the same fsync mode: one plain, one with TLS (a self-signed
certificate made with the ``openssl`` CLI) and ``--auth on`` (every request carries a
delegation token the server checks, cached per connection and resource). Runs the rounds
alternately and keeps each side's best, then prints events/s and the TLS+auth / plain
ratio (the target of issue 20 is >= 70 %). Usage::

    .venv/bin/python scripts/bench_tls.py                       # fsync=never, 200k events
    .venv/bin/python scripts/bench_tls.py --fsync always --events 100000 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "client"))
sys.path.insert(0, str(ROOT))

import segmentstore_client as sc  # noqa: E402
from segmentstore_client.connection import ConnectionOptions  # noqa: E402

from segmentstore.auth.tokens import Permission, TokenSigner  # noqa: E402
from segmentstore.server.launcher import ServerProcess  # noqa: E402

BATCH = 1000


def self_signed(d: Path) -> tuple[str, str]:
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-addext",
         "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return str(cert), str(key)


async def one_round(
    endpoint: str, options: ConnectionOptions, n: int, tag: str
) -> tuple[float, float]:
    segment = f"bench/{tag}{secrets.token_hex(4)}/0"
    events = [b"x" * 100] * BATCH
    async with sc.connect(endpoint, options=options) as client:
        await client.create_segment(segment)
        t0 = time.perf_counter()
        async with client.writer(segment) as w:
            for _ in range(n // BATCH):
                await w.write_many(events)
        write_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        got = 0
        async for batch in client.reader(segment).batches():
            got += len(batch)
        read_s = time.perf_counter() - t0
        assert got == n // BATCH * BATCH, got
    return n / write_s, n / read_s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fsync", default="never", choices=("always", "interval", "never"))
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        cert, key = self_signed(d)
        secret = secrets.token_hex(32).encode()
        (d / "secret").write_bytes(secret)
        common = ["--fsync", args.fsync, "--http-port", "-1"]
        plain = ServerProcess(d / "plain", common, http_port=-1)
        secure = ServerProcess(
            d / "secure",
            [*common, "--tls-cert-file", cert, "--tls-key-file", key, "--auth", "on",
             "--auth-token-secret-file", str(d / "secret")],
            http_port=-1,
        )  # fmt: skip
        plain.start()
        secure.start()
        try:
            token = TokenSigner(secret).issue(
                "bench", {"prn::/scope:bench/*": Permission.READ_UPDATE}, 3600, time.time()
            )
            sides = {
                "plain TCP": (plain.endpoint, ConnectionOptions()),
                "TLS + auth": (
                    f"tls://127.0.0.1:{secure.port}",
                    ConnectionOptions(tls_ca_file=cert, delegation_token=token),
                ),
            }
            best = {name: (0.0, 0.0) for name in sides}
            for r in range(args.rounds):
                for name, (endpoint, options) in sides.items():
                    w, rd = asyncio.run(one_round(endpoint, options, args.events, f"r{r}"))
                    best[name] = (max(best[name][0], w), max(best[name][1], rd))
        finally:
            plain.kill()
            secure.kill()
    print(f"{args.events:,} x 100 B events, fsync={args.fsync}, best of {args.rounds} rounds")
    print(f"{'':12} {'write_many ev/s':>16} {'catch-up read ev/s':>19}")
    for name, (w, rd) in best.items():
        print(f"{name:12} {w:16,.0f} {rd:19,.0f}")
    (pw, pr), (sw, sr) = best["plain TCP"], best["TLS + auth"]
    print(f"{'ratio':12} {sw / pw:16.0%} {sr / pr:19.0%}")


if __name__ == "__main__":
    main()
