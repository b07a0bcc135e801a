"""``python -m kokumi.testing build``: build (or find in the cache) the local control plane's
binaries, so that a test run does not charge their build to its first test."""

from kokumi.testing.controlplane import main

raise SystemExit(main())
