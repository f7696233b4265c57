"""The ``segmentstore-jvm`` reader: a Spark DataSource V2 batch reader written in Java.

Spark 4's Python data sources hand Spark Arrow batches that the JVM converts to rows one
by one; this reader runs in the JVM instead and hands Spark ``ColumnarBatch``es of Arrow
vectors, as Parquet's vectorized reader does (see the README's Spark section). Its Java
sources ship with this package (``src/``) and are compiled on first use against the jars
of the installed PySpark, with the JDK's ``javac``: :func:`jar_path` builds the jar once
into a cache directory keyed by a hash of the sources and the PySpark version (a file
lock makes concurrent callers wait for one build) and returns its path.

Example::

    from pyspark.sql import SparkSession
    from segmentstore_client.spark.jvm import jar_path

    spark = SparkSession.builder.config("spark.jars", jar_path()).getOrCreate()
    df = (spark.read.format("segmentstore-jvm")
          .option("endpoint", "tcp://127.0.0.1:12345").option("segment", "demo/rows/0")
          .load())
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path
from typing import Final

SOURCES: Final = Path(__file__).resolve().parent / "src"
"""The Java sources and the service registration shipped with the package."""
FORMAT: Final = "segmentstore-jvm"
"""The reader's short name for ``spark.read.format``."""
JAR_NAME: Final = "segmentstore-spark-jvm.jar"
CACHE_ENV: Final = "SEGMENTSTORE_JVM_CACHE"
"""Environment variable naming the build cache (default ``~/.cache/segmentstore/jvm``)."""
BUILD_TIMEOUT: Final = 600.0


class JvmBuildError(RuntimeError):
    """The jar cannot be built here (no JDK, no PySpark jars, or a compiler error)."""


def _tool(name: str) -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / name).is_file():
        return str(Path(home) / "bin" / name)
    found = shutil.which(name)
    if found is None:
        raise JvmBuildError(
            f"building the {FORMAT} reader needs a Java 17+ JDK ({name} on PATH or in "
            "JAVA_HOME/bin); none found. Install one (e.g. apt-get install openjdk-17-jdk-headless)"
            " or read with format('segmentstore')"
        )
    return found


def spark_jars() -> Path:
    """The directory of the jars the installed PySpark runs with (``SPARK_HOME/jars``
    when PySpark ships none)."""
    import pyspark

    here = Path(pyspark.__file__).resolve().parent / "jars"
    if here.is_dir():
        return here
    home = os.environ.get("SPARK_HOME")
    if home and (Path(home) / "jars").is_dir():
        return Path(home) / "jars"
    raise JvmBuildError("cannot find Spark's jars (neither pyspark/jars nor $SPARK_HOME/jars)")


def _source_files() -> list[Path]:
    return sorted(p for p in SOURCES.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def source_hash() -> str:
    """A hash of the Java sources and the PySpark version they are compiled against."""
    import pyspark

    h = hashlib.sha256(pyspark.__version__.encode())
    for p in _source_files():
        h.update(str(p.relative_to(SOURCES)).encode() + b"\0")
        h.update(p.read_bytes() + b"\0")
    return h.hexdigest()[:24]


def cache_dir() -> Path:
    """Where built jars are kept."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "segmentstore" / "jvm"


def jar_path() -> str:
    """The path of the reader's jar, built on the first call (``javac`` against the
    installed PySpark's jars; 10-30 s) and reused afterwards. Raises
    :class:`JvmBuildError` with one line saying why when it cannot be built.

    Example::

        SparkSession.builder.config("spark.jars", jar_path())
    """
    target = cache_dir() / source_hash()
    jar = target / JAR_NAME
    if jar.is_file():
        return str(jar)
    javac = _tool("javac")
    jars = spark_jars()
    try:
        target.mkdir(parents=True, exist_ok=True)
        with open(target / "build.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one build; others wait, then find the jar
            if not jar.is_file():
                _build(javac, jars, jar)
    except OSError as e:
        raise JvmBuildError(
            f"cannot build the {FORMAT} jar in {target} ({e}); set {CACHE_ENV} to a "
            "writable directory"
        ) from None
    return str(jar)


def _build(javac: str, jars: Path, jar: Path) -> None:
    java = [p for p in _source_files() if p.suffix == ".java"]
    with tempfile.TemporaryDirectory(dir=jar.parent, prefix="build-") as tmp:
        classes = Path(tmp) / "classes"
        classes.mkdir()
        cmd = [javac, "-nowarn", "--release", "17", "-encoding", "UTF-8"]
        cmd += ["-cp", str(jars / "*"), "-d", str(classes), *map(str, java)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise JvmBuildError(f"javac failed to run: {e}") from None
        if done.returncode != 0:
            first = (done.stderr or done.stdout).strip().splitlines()[:3]
            raise JvmBuildError(f"javac failed (exit {done.returncode}): " + " | ".join(first))
        part = Path(tmp) / JAR_NAME
        with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            for p in sorted(classes.rglob("*.class")):
                z.write(p, str(p.relative_to(classes)))
            for p in _source_files():
                if p.suffix != ".java":
                    z.write(p, str(p.relative_to(SOURCES)))
        os.replace(part, jar)  # atomic: a reader never sees half a jar
