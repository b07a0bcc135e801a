"""``python -m kokumi.testing build``: build (or find in the cache) the local control plane's
binaries and the tools the tests check deliverables with, so that a test run does not charge their
build to its first test."""

from kokumi.testing.tools import main

raise SystemExit(main())
