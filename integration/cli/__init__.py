"""The ``twophase`` command line (console script ``twophase = twophase.integration.cli:main``).

One module per role:

- :mod:`~twophase.integration.cli.services`: ``services prepare|up|down|status``;
- :mod:`~twophase.integration.cli.flights`: ``demo`` and ``verify`` (the flights job);
- :mod:`~twophase.integration.cli.checkpoints`: ``checkpoints list|show`` for any job;
- :mod:`~twophase.integration.cli.lingering`: ``lingering [--recommit] [--abort]`` for any job;
- :mod:`~twophase.integration.cli.errors`: errors as one ``Error:`` line and exit status 1;
- :mod:`~twophase.integration.cli.target`: which job a command acts on (``--sinks module:function``,
  ``--checkpoint-dir`` with ``--job``/``--job-id``, or the flights demo run);
- :mod:`~twophase.integration.cli.output`: tables that fit 80 columns, ``--json``;
- :mod:`~twophase.integration.cli.main`: the click group.
"""

from twophase.integration.cli.main import main

__all__ = ["main"]
