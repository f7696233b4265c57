"""Streams in the SDK: routing keys, stream writers, reader groups, stream cuts, admin.

Importing this package needs no grpcio; the controller client imports it on first use.
"""

from .controller_client import NoSuchStream, StreamError, StreamExists
from .policies import RetentionPolicy, ScalingPolicy, SegmentStats, StreamInfo
from .routing import KeyRange, key_hash
from .stream_cut import StreamCut

__all__ = [
    "KeyRange",
    "NoSuchStream",
    "RetentionPolicy",
    "ScalingPolicy",
    "SegmentStats",
    "StreamCut",
    "StreamError",
    "StreamExists",
    "StreamInfo",
    "key_hash",
]
