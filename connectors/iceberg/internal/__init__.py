"""The iceberg package's internals: not part of the public API, they may change in any release.

What users build and import is exported by the package itself (and by ``twophase``).
"""
