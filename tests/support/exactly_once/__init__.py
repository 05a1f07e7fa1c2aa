"""Exactly-once suites on Spark: real process crashes at every fault point, restarts, stops."""
