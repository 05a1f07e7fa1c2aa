"""``python -m twophase.integration.cli``: the same as the ``twophase`` command."""

from twophase.integration.cli.main import main

main()
