"""segmentstore: a Pravega-compatible segment store in Python."""

__version__ = "0.1.0"
