"""Service faults (issue #16): the flights job against a three-broker Kafka cluster and a MinIO that fail."""
