# Build step for the one C extension: segmentstore.storage._dsync, the log's native write lane
# (segmentstore/storage/_dsync.c; Linux only). Everything else is in pyproject.toml. The
# extension is optional: without a C compiler or Python's headers the install still
# succeeds and the log writes through its Python thread (logged once at startup).
import sys

from setuptools import Extension, setup

ext_modules = []
if sys.platform.startswith("linux"):
    ext_modules.append(
        Extension(
            "segmentstore.storage._dsync",
            ["segmentstore/storage/_dsync.c"],
            extra_compile_args=["-Wall", "-Wextra", "-O2"],
            optional=True,
        )
    )

setup(ext_modules=ext_modules)
