"""Fixtures of the Spark tests: one local SparkSession and one server for the session.

Spark runs as ``local[2,3]``: two cores, and a task may fail twice before the job fails
(``maxFailures`` = 3), so the tests can make attempts fail and watch the retries.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ServerProcess  # tests/conftest.py

from . import faulty


@pytest.fixture(scope="session")
def spark_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One segment store for the whole Spark test session (fsync=always)."""
    s = ServerProcess(tmp_path_factory.mktemp("spark-server"), http_port=-1)
    s.start()
    yield s
    s.kill()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The session's SparkSession. ``segmentstore`` is found by Spark's automatic
    registration (``pyspark_segmentstore`` on the workers' path, as a regular install
    puts it); only the test format ``segmentstore_faulty`` is registered by hand."""
    from pyspark.sql import SparkSession

    # Python workers must import this package's helper module (tests.spark.faulty) and
    # run on this interpreter; local-mode workers inherit the driver's environment. The
    # editable install hides pyspark_segmentstore from pkgutil.iter_modules (Spark's
    # lookup), so its directory goes on the path as a regular install would.
    top = Path(faulty.__file__).resolve().parents[len(faulty.__name__.split(".")) - 1]
    paths = [
        str(top),
        str(Path(__file__).resolve().parents[2] / "client"),
        *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep)),
    ]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    builder = SparkSession.builder
    try:  # the JVM reader (tests/spark/test_jvm_reader.py); needs a JDK, built once
        from segmentstore_client.spark.jvm import JvmBuildError, jar_path

        builder = builder.config("spark.jars", jar_path())
    except JvmBuildError:
        pass
    session = (
        builder.master("local[2,3]")
        .appName("segmentstore-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(faulty.FaultySegmentStore)
    yield session
    session.stop()


@pytest.fixture
def endpoint(spark_server: ServerProcess) -> str:
    return spark_server.endpoint


@pytest.fixture
def seg() -> str:
    """A fresh segment name."""
    return f"spark/t{uuid.uuid4().hex[:12]}/0"


@pytest.fixture(scope="session")
def jvm_jar() -> str:
    """The ``segmentstore-jvm`` jar (built once). Skips only where there is no JDK at all
    (``scripts/test`` installs one where apt can, and CI=true never skips); a compiler
    error or missing PySpark jars fail the tests that use it."""
    from segmentstore_client.spark.jvm import JvmBuildError, jar_path

    try:
        return str(jar_path())
    except JvmBuildError as e:
        if "JDK" in str(e) and "none found" in str(e) and os.environ.get("CI") != "true":
            pytest.skip(str(e))
        raise
