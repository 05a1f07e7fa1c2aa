"""Test support of the end-to-end suites: running the ``twophase`` command as a user would."""
