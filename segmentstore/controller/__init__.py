"""A Pravega-compatible gRPC controller (scopes, streams, scaling, transactions, retention)
running inside ``segmentstore serve``; see ``controller.py``. Importing this package does
not import gRPC: ``from .controller import Controller`` does."""

from .errors import ControllerError

__all__ = ["ControllerError"]
