"""Internals of the Google Cloud Storage file sink (not public API)."""
