"""Errors of the controller that the rest of the server may see (no gRPC import here)."""

from __future__ import annotations


class ControllerError(RuntimeError):
    """The controller cannot start (e.g. its port is taken); the message is one line."""
