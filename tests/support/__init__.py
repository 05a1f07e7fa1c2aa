"""Support for this project's own tests: models of the services (Kafka's transaction coordinator,
S3, Delta, PostgreSQL, Iceberg) and of checkpoint storage, the in-process harness that drives the
production runtime and executor loop, fake sinks, a manual clock, the model check's alphabets and
accounting, and the job scripts and writer processes the integration suites start. Importable as
``support`` (pytest's ``pythonpath = tests``; PYTHONPATH for the processes the suites start),
never installed."""
