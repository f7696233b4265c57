"""How the model-based (hypothesis ``RuleBasedStateMachine``) tests run, one rule for all.

CI runs each machine's default number of examples and steps. The environment makes a long
run: ``SEGMENTSTORE_MODEL_EXAMPLES`` (examples), ``SEGMENTSTORE_MODEL_STEPS`` (steps per
example), ``SEGMENTSTORE_MODEL_SHRINK=0`` (report a failure as found, without minutes of
shrinking) and ``SEGMENTSTORE_MODEL_TRACE=1`` (print every example's steps, no database:
for failures that depend on timing, which hypothesis cannot replay). E.g.
``SEGMENTSTORE_MODEL_EXAMPLES=2000 .venv/bin/pytest tests/tables/test_table_model.py``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis.stateful import RuleBasedStateMachine

from segmentstore.storage import SegmentStore
from segmentstore.tables import TableStore


def examples(default: int) -> int:
    """The examples a run makes: the environment's, else the machine's CI default."""
    return int(os.environ.get("SEGMENTSTORE_MODEL_EXAMPLES", str(default)))


def model_settings(default_examples: int, default_steps: int) -> settings:
    """The hypothesis settings of one machine, from its CI defaults and the environment."""
    steps = int(os.environ.get("SEGMENTSTORE_MODEL_STEPS", str(default_steps)))
    shrink = os.environ.get("SEGMENTSTORE_MODEL_SHRINK", "1") != "0"
    phases = tuple(Phase) if shrink else (Phase.explicit, Phase.reuse, Phase.generate)
    extra: dict[str, object] = {}
    if os.environ.get("SEGMENTSTORE_MODEL_TRACE") == "1":
        phases, extra = (Phase.generate,), {"database": None, "verbosity": Verbosity.debug}
    return settings(
        max_examples=examples(default_examples),
        stateful_step_count=steps,
        deadline=None,
        phases=phases,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        **extra,  # type: ignore[arg-type]
    )


class OnDiskMachine(RuleBasedStateMachine):
    """A machine over a store on real files: its own event loop and temporary directory
    (``data`` is the live directory; crash copies go beside it), ``run`` with a bound, and
    a teardown that closes the tables and the store, then removes the directory. A
    subclass sets its own state, then opens with ``self.run(self.open(self.data))``."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = Path(tempfile.mkdtemp(prefix=prefix))
        self.data = self.dir / "data"
        self.copies = 0
        self.store: SegmentStore | None = None
        self.tables: TableStore | None = None

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coro, 30))

    async def open(self, data: Path) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        if self.tables is not None:
            await self.tables.close()
            self.tables = None
        if self.store is not None:
            await self.store.close()
            self.store = None

    def teardown(self) -> None:
        try:
            self.run(self.close())
        finally:
            self.loop.close()
            shutil.rmtree(self.dir, ignore_errors=True)
