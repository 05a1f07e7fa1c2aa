"""twophase benchmarks: each ``bench_*.py`` module exposes ``run() -> dict``; ``benchmarks.run`` runs them."""
