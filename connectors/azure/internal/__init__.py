"""Internals of the Azure Blob Storage file sink (not public API)."""
