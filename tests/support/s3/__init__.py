"""Integration tests of the S3 sink against a real S3 server (MinIO)."""
