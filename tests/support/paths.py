"""The checkout's root, for tests that read files of the repository (docs, deploy/, examples).

One place, so that a test's own folder says nothing about where the repository is.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
