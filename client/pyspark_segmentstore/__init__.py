"""Spark 4's automatic registration of the ``segmentstore`` data source.

PySpark looks, once per Spark application, for top-level modules named ``pyspark_*`` on
the Python path and registers the ``DefaultSource`` class of each as a static data
source (``pyspark/sql/worker/lookup_data_sources.py``). This module is that hook: with
the package installed (``pip install segmentstore[spark]``, not an editable install,
whose modules ``pkgutil.iter_modules`` cannot see) ``format("segmentstore")`` works in
every session and from every thread without :func:`segmentstore_client.spark.register`.
"""

from segmentstore_client.spark.datasource import SegmentStoreDataSource as DefaultSource

__all__ = ["DefaultSource"]
