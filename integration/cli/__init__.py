"""The ``twophase`` command line (console script ``twophase = twophase.integration.cli:main``).

One module per role (``services``, ``flights``, ``flights_runs`` and ``package`` are development
tooling: they run from a checkout and are not in the wheel users install):

- :mod:`~twophase.integration.cli.services`: ``services prepare|up|down|status``;
- :mod:`~twophase.integration.cli.flights`: ``demo`` and ``verify`` (the flights job);
- :mod:`~twophase.integration.cli.checkpoints`: ``checkpoints list|show`` for any job;
- :mod:`~twophase.integration.cli.lingering`: ``lingering [--recommit] [--abort]`` for any job;
- :mod:`~twophase.integration.cli.errors`: errors as one ``Error:`` line and exit status 1;
- :mod:`~twophase.integration.cli.target`: which job a command acts on (``--sinks module:function``,
  ``-o`` query options, ``--checkpoint-dir`` with ``--job``/``--job-id``, or in a checkout the
  flights demo run of :mod:`~twophase.integration.cli.flights_runs`);
- :mod:`~twophase.integration.cli.package`: ``package wheel|env`` from the checkout's sources;
- :mod:`~twophase.integration.cli.output`: tables that fit 80 columns, ``--json``;
- :mod:`~twophase.integration.cli.main`: the click group.
"""

from twophase.integration.cli.main import main

__all__ = ["main"]
