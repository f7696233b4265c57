"""The README's Spark examples run in the suite's SparkSession against a real store with
its controller (the runner is ``tests/docs/spark_examples.py``; the examples run in README
order, each finding what the ones before it wrote).

Six Spark jobs: 10-75 s depending on the machine's load, so it runs only with
``SEGMENTSTORE_TEST_README_SPARK=1``; without it, ``tests/docs/test_readme_examples.py``
still checks every option and save mode of these examples against the source."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import ServerProcess  # tests/conftest.py
from controller.conftest import controller_uri  # tests/controller/conftest.py
from docs.spark_examples import ROWS, run, spark_blocks


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    s = ServerProcess(
        tmp_path_factory.mktemp("readme-spark"),
        extra_args=["--controller-port", "0", "--fsync", "never"],
        http_port=-1,
    )
    s.start()
    yield s.endpoint, controller_uri(s)
    s.kill()


@pytest.mark.skipif(
    os.environ.get("SEGMENTSTORE_TEST_README_SPARK") != "1",
    reason="six Spark jobs: SEGMENTSTORE_TEST_README_SPARK=1 runs them",
)
def test_readme_spark_examples(spark: Any, store: tuple[str, str]) -> None:
    endpoint, controller = store
    blocks = spark_blocks()
    assert len(blocks) >= 4, "the README's Spark examples moved"
    read = spark.read.format("segmentstore").option("endpoint", endpoint)
    for block in blocks:
        ns = run(block, spark, endpoint, controller)
        if "orders" in ns:  # Batch and Streams: the rows written read back, same columns
            orders = ns["orders"]
            assert orders.count() == len(ROWS), block.where()
            assert orders.columns[:3] == ["id", "customer", "amount"], block.where()
    assert read.option("segment", "s/0").load().count() == len(ROWS)  # activate()'s thread
