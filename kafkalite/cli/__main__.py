"""``python -m kafkalite.cli``: the command line, as ``kafkalite`` and
``python -m kafkalite`` run it."""
import sys

from kafkalite.cli import main

sys.exit(main())
