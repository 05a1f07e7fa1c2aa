"""Test support for sink authors and the project's own tests: in-memory fake sinks with exact
committed/aborted/lingering sets (``fakes``), a deterministic in-process harness that drives the
production runtime and executor loop (``harness``), in-memory checkpoint storage
(``memory_storage``) and a manual clock (``clock``). Nothing here is used by a production path.
"""
