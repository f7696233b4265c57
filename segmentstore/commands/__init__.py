"""Subcommands of the ``segmentstore`` command line other than ``serve`` (see ``cli.py``)."""
