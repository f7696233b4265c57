"""Fixtures for the relay tests: a server with the controller on (streams are sources)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import ServerFactory, ServerProcess  # tests/conftest.py


@pytest.fixture
def srv(server_factory: ServerFactory) -> ServerProcess:
    """A started server with its gRPC controller on an ephemeral port."""
    s = server_factory(extra_args=["--controller-port", "0"])
    s.start()
    return s
