"""``python -m kokumi`` is the ``kokumi`` command."""

from kokumi.cmd.root import main

raise SystemExit(main())
