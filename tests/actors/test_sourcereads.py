"""What the sources read besides their watch: an API that is not installed yet (Cluster API's
CRD applied while the manager runs) is picked up within seconds, however long it was missing,
and the sources are told which it is: missing or forbidden.

On trio's mock clock: the seconds are the manager's own arithmetic, not a race with a server.
"""

from __future__ import annotations

from typing import Any

import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from kokumi.actors.sourcereads import follow_listed
from kokumi.core.sources.clusterapi import CAPI_CLUSTERS
from kokumi.kube import errors
from kokumi.kube.watch import Store

MISSING_MAX = 5.0


class Hub:
    """Answers the list of Cluster API's clusters as a hub would: 404 until ``installed`` (the
    CRD applied), 403 while ``forbidden``; the first list that goes through is noted, and
    ends the test (the watch after it is the real hub's: tests/manager)."""

    def __init__(self, installed_at: float, scope: trio.CancelScope) -> None:
        self.installed_at = installed_at
        self.forbidden = False
        self.listed_at: float | None = None
        self.asked = 0
        self._scope = scope

    async def request(self, method: str, path: str, **_: Any) -> object:
        self.asked += 1
        if trio.current_time() < self.installed_at:
            raise errors.NotFound(404, "NotFound", "the server could not find the resource")
        if self.forbidden:
            raise errors.Forbidden(403, "Forbidden", "clusters.cluster.x-k8s.io is forbidden")
        self.listed_at = trio.current_time()
        self._scope.cancel()  # the watch it starts next is cancelled in its first list
        return {}

    async def list(self, *_: Any, **__: Any) -> object:
        await trio.sleep_forever()


async def follow(hub: Hub, told: list[tuple[str, bool]]) -> None:
    async with trio.open_nursery() as nursery:
        await follow_listed(
            hub,  # type: ignore[arg-type]  # the one method follow_listed asks of a Client
            nursery,
            CAPI_CLUSTERS,
            None,
            Store(),
            what="Cluster API's clusters",
            reported="ClusterAPINotReadable",
            backoff_max=300.0,
            missing_max=MISSING_MAX,
            readable=lambda value: told.append(("readable", value)),
            changed=lambda _: None,
            installed=lambda value: told.append(("installed", value)),
        )


def run(test: Any) -> None:
    trio.run(test, clock=trio.testing.MockClock(autojump_threshold=0))


@settings(max_examples=50, deadline=None)
@given(st.floats(min_value=0.0, max_value=3600.0))
def test_a_crd_applied_while_the_manager_runs_is_picked_up_within_seconds(after: float) -> None:
    async def main() -> None:
        told: list[tuple[str, bool]] = []
        with trio.CancelScope() as scope:
            hub = Hub(trio.current_time() + after, scope)
            await follow(hub, told)
        assert hub.listed_at is not None
        # However long it was missing, it is asked for again at most MISSING_MAX later:
        # a backoff up to minutes made the first Cluster API cluster wait half a minute or more.
        assert hub.listed_at - hub.installed_at <= MISSING_MAX
        if after > 0:
            # While missing, the sources were told so once, and what it is: not installed.
            assert told[:2] == [("installed", False), ("readable", False)]
        assert told[-1] == ("installed", True)

    run(main)


def test_forbidden_is_told_apart_from_missing_and_keeps_its_longer_backoff() -> None:
    async def main() -> None:
        told: list[tuple[str, bool]] = []
        with trio.CancelScope() as scope:
            hub = Hub(trio.current_time() + 30.0, scope)
            hub.forbidden = True
            with trio.move_on_after(3600.0):
                await follow(hub, told)
        # Missing, then there but forbidden: each told once, as it changed.
        assert told == [
            ("installed", False),
            ("readable", False),
            ("installed", True),
            ("readable", False),
        ]
        # A permission is a person's to grant: no ask every few seconds for an hour.
        assert hub.asked < 3600.0 / MISSING_MAX / 4

    run(main)
