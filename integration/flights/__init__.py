"""Tests of the flights job: end to end on a subset, the verifier, the commands."""
