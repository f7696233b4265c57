"""The relay's status page in a real browser (headless Chromium over the DevTools
protocol): it lists the sources and its numbers change, without a reload, as events are
appended and consumed. The screenshot's path is printed (pytest -s shows it)."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import re
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from .helpers import db_windows, get, source_name, stream_all, unique_segment, write

if TYPE_CHECKING:
    from conftest import ServerProcess

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",
    "--window-size=1400,700",
]
LISTENING = re.compile(r"DevTools listening on (ws://\S+)")


class Page:
    """Just enough of the DevTools protocol: navigate, evaluate, screenshot."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.ids = itertools.count(1)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        msg_id = next(self.ids)
        await self.ws.send_json({"id": msg_id, "method": method, "params": params})
        while True:
            msg = await asyncio.wait_for(self.ws.receive_json(), 20)
            if msg.get("id") == msg_id:
                assert "error" not in msg, msg
                result: dict[str, Any] = msg["result"]
                return result

    async def text(self, element_id: str) -> str | None:
        expr = f"(e => e && e.textContent)(document.getElementById({json.dumps(element_id)}))"
        result = await self.call("Runtime.evaluate", expression=expr, returnByValue=True)
        value = result["result"].get("value")
        return None if value is None else str(value)

    async def wait_text(self, element_id: str, differs_from: str | None, limit: float) -> str:
        for _ in range(int(limit / 0.1)):
            value = await self.text(element_id)
            if value is not None and value != differs_from:
                return value
            await asyncio.sleep(0.1)
        raise AssertionError(f"#{element_id} stayed {differs_from!r}")


@pytest.fixture
async def browser(tmp_path: Path) -> AsyncIterator[Page]:
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (scripts/test installs it where apt works)")
    proc = subprocess.Popen(
        [CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        endpoint = None
        for _ in range(200):
            line = await asyncio.to_thread(proc.stderr.readline)
            if not line:
                break
            m = LISTENING.search(line)
            if m:
                endpoint = m.group(1)
                break
        if endpoint is None:
            pytest.skip("chromium did not start its DevTools endpoint")
        http = endpoint.replace("ws://", "http://").split("/devtools/")[0]
        async with aiohttp.ClientSession() as session:
            async with session.get(http + "/json/list") as r:
                targets = await r.json()
            page_ws = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
            async with session.ws_connect(page_ws, max_msg_size=64 << 20) as ws:
                yield Page(ws)
    finally:
        proc.kill()
        proc.wait(10)


async def test_status_page_shows_live_numbers(
    module_server: ServerProcess, browser: Page, tmp_path: Path
) -> None:
    port = module_server.http_port
    seg = unique_segment("status")
    await write(module_server.endpoint, seg, db_windows(5, 4))
    _s, _h, body = await get(port, "/sources")
    src = next(s["id"] for s in json.loads(body) if s["name"] == source_name(seg))
    await browser.call("Page.enable")
    await browser.call("Page.navigate", url=f"http://127.0.0.1:{port}/")
    name = await browser.wait_text(f"src-{src}-name", None, 10)
    assert name == source_name(seg)
    events = await browser.wait_text(f"src-{src}-events", None, 10)
    assert events == "20"
    served = await browser.wait_text("out-events", None, 10)
    # appended and consumed while the page stays open: it refreshes itself
    await write(module_server.endpoint, seg, db_windows(30, 4, first_seq=1000))
    assert await browser.wait_text(f"src-{src}-events", "20", 10) == "140"
    await stream_all(port, source_name(seg))
    assert await browser.wait_text("out-events", served, 10) != served
    assert await browser.wait_text(f"src-{src}-maxScn", None, 5) == "1029"
    shot = await browser.call("Page.captureScreenshot", format="png")
    png = tmp_path / "relay-status.png"
    png.write_bytes(base64.b64decode(shot["data"]))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    print(f"\nstatus page screenshot: {png}")
