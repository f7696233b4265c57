"""``Bound``: the failure-path tests' time limit (a documented timeout plus 1 s)."""

from __future__ import annotations

import time

SLACK = 1.0


class Bound:
    """``with Bound(seconds):`` fails the test if the block took longer than ``seconds``
    plus :data:`SLACK`."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.start = 0.0
        self.elapsed = 0.0

    def __enter__(self) -> Bound:
        self.start = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.elapsed = time.monotonic() - self.start
        assert self.elapsed <= self.seconds + SLACK, f"took {self.elapsed:.2f}s"
