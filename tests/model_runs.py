"""How the model-based (hypothesis ``RuleBasedStateMachine``) tests run, one rule for all.

CI runs each machine's default number of examples and steps. The environment makes a long
run: ``SEGMENTSTORE_MODEL_EXAMPLES`` (examples), ``SEGMENTSTORE_MODEL_STEPS`` (steps per
example), ``SEGMENTSTORE_MODEL_SHRINK=0`` (report a failure as found, without minutes of
shrinking) and ``SEGMENTSTORE_MODEL_TRACE=1`` (print every example's steps, no database:
for failures that depend on timing, which hypothesis cannot replay). E.g.
``SEGMENTSTORE_MODEL_EXAMPLES=2000 .venv/bin/pytest tests/tables/test_table_model.py``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, Verbosity, settings


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
