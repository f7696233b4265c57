"""Drives the official Pravega Python client with ``auth_enabled`` and ``tls_enabled``
against a secure server: ``python official_driver.py <json args>``; prints one JSON line.

Credentials go in the client's environment variables (``pravega_client_auth_method``,
``..._username``, ``..._password``), the trusted CA in ``pravega_client_tls_cert_path``.
It creates a scope and stream, writes ``count`` events, reads them back through a reader
group, and reports what it read.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

import pravega_client as pc


def main(a: dict[str, Any]) -> dict[str, Any]:
    m = pc.StreamManager(a["uri"], True, True, a.get("no_verify", False))
    m.create_scope(a["scope"])
    m.create_stream(a["scope"], a["stream"], 1)
    w = m.create_writer(a["scope"], a["stream"])
    for i in range(a["count"]):
        w.write_event(f"e{i}")
    w.flush()
    rg = m.create_reader_group("rg1", a["scope"], a["stream"])
    reader = rg.create_reader("r1")
    got: list[str] = []

    async def loop() -> None:
        deadline = time.monotonic() + 60
        while len(got) < a["count"] and time.monotonic() < deadline:
            piece = await asyncio.wait_for(reader.get_segment_slice_async(), 30)
            got.extend(ev.data().decode() for ev in piece)
            reader.release_segment(piece)

    asyncio.run(loop())
    reader.reader_offline()
    return {"read": got}


if __name__ == "__main__":
    try:
        result = main(json.loads(sys.argv[1]))
    except Exception as e:  # reported to the test, which shows it
        result = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(result), flush=True)
    os._exit(0)  # the client's threads can crash during interpreter teardown
