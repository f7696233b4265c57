"""Fixtures for the format tests that need a server: a client on the module's server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import pytest
import segmentstore_client as sc

if TYPE_CHECKING:
    from conftest import ServerProcess  # tests/conftest.py


@pytest.fixture
async def fclient(module_server: ServerProcess) -> AsyncIterator[sc.Client]:
    async with sc.connect(module_server.endpoint, reconnect_timeout=20) as c:
        yield c


@pytest.fixture
def fsegment() -> str:
    return f"formats/s{uuid.uuid4().hex[:12]}/0"
