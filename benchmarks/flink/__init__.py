"""The Flink comparison's parts (issue #44 item 1): the pure analysis (:mod:`.analysis`), the
watcher process (:mod:`.watcher`), the Flink side (:mod:`.engine` and the Java job under
``java/``); :mod:`benchmarks.bench_flink` runs them."""
