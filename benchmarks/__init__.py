"""twophase benchmarks: each ``bench_*.py`` module exposes ``run() -> dict``; ``benchmarks.run`` runs them.

Some reuse the test support's service helpers (``tests/support``, the package ``support``), so its
folder is put on ``sys.path`` here; neither ships.
"""

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parents[1] / "tests")
if _TESTS not in sys.path:
    sys.path.append(_TESTS)
