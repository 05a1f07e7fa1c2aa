"""End-to-end tests of the Python Data Source facade (``coordinator/spark/datasource.py``) on Spark."""
