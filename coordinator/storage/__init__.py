"""Checkpoint storage backends: local/POSIX and S3."""
