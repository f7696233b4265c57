"""``segmentstore health``: is the store serving? For scripts, containers (the
Dockerfile's HEALTHCHECK) and load balancers.

Three checks, each bounded by ``--timeout``: the Hello exchange; a round trip on a fresh
scratch segment (create, append one event, read it back equal, delete); and the
Prometheus ``/metrics`` endpoint answering 200 with segmentstore metrics, counting the
round trip's create (so the page is this store's, not another one's on the guessed port)
and no container stopped by an internal error (``segmentstore_containers_stopped`` 0). Exit code 0
when all pass, 1 otherwise; a line per check for people, or one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import dataclasses
import json
import os
import ssl
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Awaitable
from dataclasses import asdict, dataclass
from typing import Any, Final

import segmentstore_client as sc

from ._cli import (
    Exit,
    add_global_options,
    connect,
    credentials,
    examples,
    parsed_endpoint,
    run,
    timeout,
    tls_ca_file,
)
from ._render import aligned

METRICS_ENV: Final = "SEGMENTSTORE_METRICS_URL"
DEFAULT_METRICS_PORT: Final = 9091
# Containers an internal error stopped (storage/commit.py's fail-stop): > 0 is unhealthy.
STOPPED_GAUGE: Final = "segmentstore_containers_stopped"
# The round trip's create shows here on its store's page (and not on another store's).
CREATES: Final = 'segmentstore_requests_total{command="CreateSegment"}'


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "health",
        help="check that a store serves (exit 0) or not (exit 1)",
        description="Check a running segment store: the Hello exchange, a write/read round "
        "trip on a scratch segment, and its /metrics endpoint. Exit code 0 if all pass, 1 "
        "otherwise.",
        epilog=examples(
            "segmentstore health",
            "segmentstore health --endpoint tcp://10.0.0.5:12345 --timeout 2",
            "segmentstore health --metrics-url http://127.0.0.1:9100/metrics --json",
            "segmentstore health --no-metrics || echo unhealthy",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_global_options(p)
    p.add_argument(
        "--metrics-url",
        help=f"the store's metrics URL (default ${METRICS_ENV} or http://<endpoint "
        f"host>:{DEFAULT_METRICS_PORT}/metrics, https for a tls:// endpoint; --tls-ca-file, "
        "--user and --token apply to it too)",
    )
    p.add_argument("--no-metrics", action="store_true", help="skip the metrics check")
    p.add_argument("--json", action="store_true", help="one JSON object with every check")
    p.set_defaults(func=_handler)


@dataclass
class Check:
    name: str
    ok: bool
    ms: float | None
    detail: str


def metrics_url(args: argparse.Namespace) -> str:
    if args.metrics_url:
        return str(args.metrics_url)
    if os.environ.get(METRICS_ENV):
        return os.environ[METRICS_ENV]
    endpoint = parsed_endpoint(args)
    scheme = "https" if endpoint.tls else "http"  # with TLS on, every port speaks it
    return f"{scheme}://{dataclasses.replace(endpoint, port=DEFAULT_METRICS_PORT).netloc}/metrics"


async def _timed(name: str, step: Awaitable[str], limit: float) -> Check:
    started = time.perf_counter()
    try:
        detail = await asyncio.wait_for(step, limit)
    except TimeoutError:
        return Check(name, False, None, f"no answer within {limit:g} s")
    except Exception as e:
        return Check(name, False, None, str(e).splitlines()[0] if str(e) else type(e).__name__)
    return Check(name, True, round((time.perf_counter() - started) * 1000, 2), detail)


async def _round_trip(client: sc.Client) -> str:
    name = f"_health/{uuid.uuid4().hex}/0"
    payload = f"health {time.time_ns()}".encode()
    await client.create_segment(name)
    try:
        async with client.writer(name) as w:
            await (await w.write(payload))
        events = [e.data async for e in client.reader(name)]
        if events != [payload]:
            raise RuntimeError(f"read back {events!r} instead of {payload!r}")
    finally:
        await client.delete(name, missing_ok=True)
    return f"created, wrote, read back and deleted {name}"


def _fetch_metrics(
    url: str, limit: float, ca_file: str = "", creds: tuple[str, str] | str | None = None
) -> str:
    """The metrics page's text; RuntimeError with one line when it cannot be had."""
    # The wire port's CA and credentials: with TLS on the HTTP port serves the same
    # certificate, and with --http-auth on it takes the same users and tokens.
    request = urllib.request.Request(url)
    if isinstance(creds, tuple):
        basic = base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {basic}")
    elif creds:
        request.add_header("Authorization", f"Bearer {creds}")
    context = (
        ssl.create_default_context(cafile=ca_file or None) if url.startswith("https:") else None
    )
    try:
        with urllib.request.urlopen(request, timeout=limit, context=context) as reply:
            body: str = reply.read(16 << 20).decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"{url}: HTTP {e.code}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        if isinstance(reason, ConnectionRefusedError):
            # The guess (port 9091 on the endpoint's host) is wrong for a store started
            # with another --http-port, or none.
            reason = (
                "connection refused (metrics on another --http-port? --metrics-url names "
                "it, --no-metrics skips this check)"
            )
        elif isinstance(reason, OSError) and reason.strerror:
            reason = reason.strerror
        raise RuntimeError(f"{url}: {reason}") from None
    return body


def _creates(body: str) -> float:
    """The page's count of CreateSegment requests (no line: none yet)."""
    for line in body.splitlines():
        name, _, value = line.partition(" ")
        if name == CREATES:
            try:
                return float(value)
            except ValueError:
                break
    return 0.0


def _creates_now(
    url: str, limit: float, ca_file: str = "", creds: tuple[str, str] | str | None = None
) -> float | None:
    """Before the round trip: how many creates the page counts (None if it cannot say;
    the metrics check reports why)."""
    try:
        return _creates(_fetch_metrics(url, limit, ca_file, creds))
    except RuntimeError:
        return None


def _get_metrics(
    url: str,
    limit: float,
    ca_file: str = "",
    creds: tuple[str, str] | str | None = None,
    creates_before: float | None = None,
) -> str:
    """The metrics check. ``creates_before``: the page's CreateSegment count before this
    check's round trip created its scratch segment; the page must count that create, or it
    is another server's (a second store on the guessed port 9091, say)."""
    body = _fetch_metrics(url, limit, ca_file, creds)
    lines = body.splitlines()
    series = sum(1 for line in lines if line.startswith("segmentstore_"))
    if not series:
        raise RuntimeError(f"{url}: no segmentstore_ metrics in the answer")
    for line in lines:
        name, _, value = line.partition(" ")
        if name == STOPPED_GAUGE and value.strip() not in ("0", "0.0"):
            raise RuntimeError(
                f"{url}: {value.strip()} container(s) stopped after an internal error; "
                "restart the server (its /healthz names them)"
            )
    if creates_before is not None and _creates(body) < creates_before + 1:
        raise RuntimeError(
            f"{url}: these metrics did not count this check's scratch segment, so they "
            "are another server's (--metrics-url names this one's, --no-metrics skips "
            "this check)"
        )
    return f"{url}: {series} segmentstore series"


async def _checks(args: argparse.Namespace) -> list[Check]:
    limit = timeout(args)
    checks: list[Check] = []
    url = "" if args.no_metrics else metrics_url(args)
    auth = (tls_ca_file(args), credentials(args))
    creates_before = None
    if url:
        creates_before = await asyncio.to_thread(_creates_now, url, limit, *auth)
    client = connect(args)
    try:
        hello = await _timed("hello", _open(client), limit)
        checks.append(hello)
        if hello.ok:
            checks.append(await _timed("round trip", _round_trip(client), limit))
        else:
            checks.append(Check("round trip", False, None, "skipped: no connection"))
    finally:
        await client.close()
    if url:
        if not checks[-1].ok:
            creates_before = None  # nothing of ours to find on the page
        step = asyncio.to_thread(_get_metrics, url, limit, *auth, creates_before)
        checks.append(await _timed("metrics", step, limit + 1))
    return checks


async def _open(client: sc.Client) -> str:
    await client.open()
    return f"{client.endpoint} answered Hello"


def _handler(args: argparse.Namespace) -> int:
    async def body() -> int:
        if not args.no_metrics:
            metrics_url(args)  # a bad endpoint is a usage error, before any check
        checks = await _checks(args)
        healthy = all(c.ok for c in checks)
        if args.json:
            print(json.dumps({"healthy": healthy, "checks": [asdict(c) for c in checks]}))
        else:
            rows = [
                (
                    "ok" if c.ok else "FAIL",
                    c.name,
                    "-" if c.ms is None else f"{c.ms:.1f} ms",
                    c.detail,
                )
                for c in checks
            ]
            print(aligned(("", "CHECK", "TIME", "DETAIL"), rows).lstrip("\n"))
            print("healthy" if healthy else "unhealthy")
        return Exit.OK if healthy else Exit.FAILED

    return run(args, body)
