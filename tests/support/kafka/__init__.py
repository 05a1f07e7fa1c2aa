"""Integration tests of the Kafka connector against a real broker (marker ``kafka``)."""
