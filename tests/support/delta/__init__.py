"""Delta sink on real Spark: a mapInArrow driver of the sink and delta-spark read-back tests."""
