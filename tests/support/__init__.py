"""Support for this project's own tests (models' alphabets, scenarios, CLI runners): importable as
``support`` (pytest's ``pythonpath = tests``), never installed."""
