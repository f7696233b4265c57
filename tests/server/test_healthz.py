"""``/healthz`` on the HTTP port: 200 while every container works, 503 naming the container
once an internal error stopped it (storage/commit.py's fail-stop), so a load balancer or an
orchestrator stops sending it traffic and an operator restarts it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest
import segmentstore_client as sc

from segmentstore.config import ServerConfig
from segmentstore.server.server import Server


async def _get(port: int) -> tuple[int, dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/healthz") as reply,
    ):
        return reply.status, await reply.json()


async def test_healthz_turns_503_when_a_container_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = ServerConfig(
        host="127.0.0.1",
        port=0,
        http_host="127.0.0.1",
        http_port=0,
        controller_port=-1,
        data_dir=tmp_path,
        fsync="never",
        log_level="WARNING",
    )
    server = await Server.start(config)
    try:
        assert server.metrics_port is not None
        assert await _get(server.metrics_port) == (200, {"status": "ok"})

        client = await sc.connect(f"tcp://127.0.0.1:{server.address[1]}")
        try:
            await client.create_segment("h/s/0")
            writer = client.writer("h/s/0")
            await writer.start()
            await (await writer.write(b"before"))
            for container in server.ctx.store._containers:
                apply = container._apply

                def broken(ops: Any, c: Any = container, real: Any = apply) -> None:
                    monkeypatch.setattr(c, "_apply", real)  # once
                    raise ZeroDivisionError("injected")

                monkeypatch.setattr(container, "_apply", broken)
            with pytest.raises(sc.SegmentStoreError):
                await (await writer.write(b"after"))
        finally:
            await client.close()

        status, body = await _get(server.metrics_port)
        assert status == 503 and body["status"] == "stopped"
        assert len(body["containers"]) == 1
        assert "stopped after an internal error (ZeroDivisionError)" in body["containers"][0]
    finally:
        await server.shutdown()
