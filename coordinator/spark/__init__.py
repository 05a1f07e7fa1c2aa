"""Execution on Spark (DESIGN.md §6): the only part of ``coordinator`` that imports pyspark."""
