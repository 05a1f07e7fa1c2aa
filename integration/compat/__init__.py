"""`make compat`: the compatibility subset in fresh venvs, one per Spark × Python cell (COMPAT.md)."""
