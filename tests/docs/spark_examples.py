"""Run the README's Spark examples in a given SparkSession (used by
``tests/spark/test_readme_examples.py``, which has the suite's one session).

Contract: ``spark_blocks()`` are the Python blocks of the Spark subsections that
``test_readme_examples.TESTED`` names, without those marked ``<!-- no-test: ... -->``.
``run(block, spark, endpoint, controller)`` runs one in the session against a store with
its controller: the README's ports are substituted, a stream's ``controller`` option is
added after its ``endpoint`` (the README's store has its controller on the default port
9090, which a test cannot take), and the names the fragments use are given: ``spark``,
``df`` (the rows the examples write: ``id``, ``customer``, ``amount``), ``ep`` and ``cut``
(the head cut of ``shop/orders``). A block's exception, or one raised in a thread it
started (joined), fails with the README line. The namespace is returned for the
caller's checks.
"""

from __future__ import annotations

import threading
from typing import Any

from .readme_blocks import Block
from .test_readme_examples import SELECTED

ROWS = [(i, f"customer-{i % 7}", float(i * 10)) for i in range(60)]
SCHEMA = "id long, customer string, amount double"


def spark_blocks() -> list[Block]:
    return [b for b in SELECTED if b.section == "Spark" and b.lang == "python" and not b.no_test]


def prepare(endpoint: str, controller: str) -> Any:
    """What the examples expect to exist: the stream shop/orders and orders/1."""
    from segmentstore_client import sync

    with sync.connect(endpoint, controller=controller) as c:
        c.create_scope("shop", exist_ok=True)
        c.create_stream("shop/orders", 4, exist_ok=True)
        c.create_segment("orders/1", exist_ok=True)
        return c.stream_info("shop/orders").head


def run(block: Block, spark: Any, endpoint: str, controller: str) -> dict[str, Any]:
    code = block.body.replace("tcp://127.0.0.1:12345", endpoint)
    code = code.replace(
        '.option("stream", "shop/orders")',
        f'.option("stream", "shop/orders").option("controller", {controller!r})',
    )
    ns: dict[str, Any] = {
        "spark": spark,
        "df": spark.createDataFrame(ROWS, SCHEMA),
        "ep": endpoint,
        "cut": prepare(endpoint, controller),
    }
    where = f"README.md:{block.line}"
    errors: list[BaseException] = []
    before = set(threading.enumerate())
    old_hook = threading.excepthook
    threading.excepthook = lambda a: errors.append(a.exc_value or RuntimeError(a.exc_type))
    try:
        exec(compile(code, where, "exec"), ns)
        for t in set(threading.enumerate()) - before:
            target = getattr(t, "_target", None)  # the example's own, not py4j's or Spark's
            if getattr(getattr(target, "__code__", None), "co_filename", "") == where:
                t.join(120)
    finally:
        threading.excepthook = old_hook
    if errors:
        raise AssertionError(f"{block.where()}: its thread failed: {errors[0]}") from errors[0]
    return ns
