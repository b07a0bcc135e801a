"""``python -m kokumi`` is the ``kokumi`` command."""

from kokumi.cli import main

raise SystemExit(main())
