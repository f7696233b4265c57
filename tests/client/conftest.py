"""Fixtures for the client SDK tests: an async client on the module's real server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import pytest
import segmentstore_client as sc

if TYPE_CHECKING:
    from conftest import ServerProcess  # tests/conftest.py


@pytest.fixture
async def client(module_server: ServerProcess) -> AsyncIterator[sc.Client]:
    async with sc.connect(module_server.endpoint, reconnect_timeout=20) as c:
        yield c


@pytest.fixture
def segment() -> str:
    """A fresh segment name (the module's tests share one server)."""
    return f"sdk/s{uuid.uuid4().hex[:12]}/0.#epoch.0"
