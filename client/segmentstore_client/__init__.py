"""segmentstore_client: the Python SDK for segmentstore (and Pravega's wire protocol)."""

__version__ = "0.1.0"
