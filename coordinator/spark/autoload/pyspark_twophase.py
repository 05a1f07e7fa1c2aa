"""Installed as the top-level module ``pyspark_twophase``: Spark's Python data source lookup
imports every installed ``pyspark_*`` module and registers its ``DefaultSource`` by name, so
``.format("twophase")`` works with no ``spark.dataSource.register`` call.

This folder has no ``__init__.py`` on purpose: it is not a package of ``twophase``; setup.cfg
installs this one file at the top level (``py_modules``).
"""

from twophase.coordinator.spark.default_source import TwophaseDataSource as DefaultSource

__all__ = ["DefaultSource"]
