"""The protocol's values and lifecycles, read by every floor above: acknowledgements, checkpoint
metadata, subtask and job lifecycles, metrics, payload codecs, the clock and fault points."""
