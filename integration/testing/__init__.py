"""Test-only sinks and helpers for the end-to-end suites (real 2PC semantics on a local file system)."""
