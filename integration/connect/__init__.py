"""Spark Connect suite: the ``twophase`` data source from a Connect client (not installed)."""
