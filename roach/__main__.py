"""``python -m roach``: the same as the ``roach`` command."""

from roach.cli import main

main()
