"""Reads of kubeconfig Secrets: one GET each, or one paged list when many wait in one namespace.

Every Cluster actor reads its kubeconfig Secret (the Secret watch is metadata only), and so does
the ClusterSources actor for each Secret it imports. In the steady state these reads are few and
spread out, and a GET each is right: eight at a time (``at_a_time``), so that the hub never gets
thousands at once.

After a restart they are not: every actor reads its Secret together, since its registration
needs the connection even when its status's finding serves as its first check. At 10,000
Clusters the hub served 83 GETs a second, so the last reads came two minutes after the restart
and the Clusters behind them missed their place in the minute. So when ``batch_at`` reads of one
namespace wait together, one list of the namespace's Secrets, in pages of ``page``, serves them
and every read of that namespace that comes while it runs: each page's Secrets go to the reads
waiting for them and the page is dropped (the data of Secrets nobody waits for is never kept; a
read that comes after its Secret's page went by is a GET of its own). A namespace listed
before is listed again only for a share of its Secrets (:data:`LIST_SHARE`). A list refused (the
manager may get but not list there) or failed leaves its reads to GET one by one, and a refused
namespace is not listed again for five minutes; the failure is one log line.

A list reads Secrets that no Cluster names too, with the same RBAC as the Secret watch's: the
manager may already list every Secret where it follows them.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter

import attrs
import trio

from kokumi.core.cluster import schedule
from kokumi.kube import errors
from kokumi.kube.client import SECRETS, Client, Obj
from kokumi.objects import metadata_of

__all__ = ["BATCH_AT", "PAGE", "SecretReads"]

log = logging.getLogger(__name__)

BATCH_AT = 32
"""Reads of one namespace waiting at once that make a list worth it: four times the reads in
flight, which only a burst (a restart, a thousand Clusters applied together) brings."""

PAGE = 500
"""Secrets per page of a list: about 2 MB of JSON for kubeconfigs of a few kB."""

LIST_SHARE = 16
"""A namespace listed before is listed again only when a sixteenth of its Secrets wait: a list
of S Secrets costs the hub about what S/16 GETs do, so a namespace of 10,000 Secrets with a few
dozen reads waiting is read by GETs."""

REFUSED_FOR = 300.0
"""Seconds a namespace whose list was refused is read by GETs only."""


@attrs.define(eq=False)
class _Waiter:
    done: trio.Event = attrs.field(factory=trio.Event)
    #: The Secret as the list gave it; None when the list did not serve it (read it alone).
    secret: Obj | None = None


@attrs.define(eq=False)
class _Listing:
    waiters: dict[str, list[_Waiter]] = attrs.field(factory=dict)
    #: The names of the pages gone by: a read of one of them is a GET of its own.
    passed: set[str] = attrs.field(factory=set)


class SecretReads:
    """The manager's reads of Secrets' data, shared by its Cluster actors and ClusterSources.

    Lists run in the nursery of :meth:`run`; before it runs (or after it stopped) every read is
    a GET.
    """

    def __init__(
        self,
        client: Client,
        *,
        at_a_time: int = schedule.CHECK_SLOTS,
        batch_at: int = BATCH_AT,
        page: int = PAGE,
        refused_for: float = REFUSED_FOR,
    ) -> None:
        self._client = client
        #: The GETs in flight, at most ``at_a_time``.
        self.limiter = trio.CapacityLimiter(at_a_time)
        self._batch_at = batch_at
        self._page = page
        self._refused_for = refused_for
        self._queued: Counter[str] = Counter()  # namespace -> GETs waiting for the limiter
        self._listings: dict[str, _Listing] = {}
        self._refused: dict[str, float] = {}  # namespace -> no list before this time
        self._sizes: dict[str, int] = {}  # namespace -> Secrets its last list held
        self._nursery: trio.Nursery | None = None
        #: Reads a list served, and lists made: what tests and benchmarks count.
        self.listed = 0
        self.lists = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None

    async def get(self, namespace: str, name: str) -> Obj:
        """The Secret ``namespace/name``; raises what a GET of it raises (``NotFound``, ...)."""
        listing = self._listings.get(namespace) or self._list_if_worth_it(namespace)
        if listing is not None and name not in listing.passed:
            secret = await self._wait_for(listing, name)
            if secret is not None:
                return secret
        self._queued[namespace] += 1
        queued = True
        try:
            async with self.limiter:
                self._unqueue(namespace)
                queued = False
                return await self._client.get(SECRETS, name, namespace=namespace)
        finally:
            if queued:
                self._unqueue(namespace)

    def _unqueue(self, namespace: str) -> None:
        self._queued[namespace] -= 1
        if self._queued[namespace] <= 0:
            del self._queued[namespace]

    def _list_if_worth_it(self, namespace: str) -> _Listing | None:
        nursery = self._nursery
        waiting = self._queued[namespace] + 1
        if nursery is None or waiting < self._batch_at:
            return None
        if waiting < self._sizes.get(namespace, 0) / LIST_SHARE:
            return None
        if self._refused.get(namespace, -float("inf")) > trio.current_time():
            return None
        self._refused.pop(namespace, None)
        listing = self._listings[namespace] = _Listing()
        nursery.start_soon(self._list, namespace, listing)
        return listing

    async def _wait_for(self, listing: _Listing, name: str) -> Obj | None:
        waiter = _Waiter()
        listing.waiters.setdefault(name, []).append(waiter)
        try:
            await waiter.done.wait()
        finally:
            if not waiter.done.is_set():  # cancelled: the list must not keep it
                waiting = listing.waiters.get(name, [])
                if waiter in waiting:
                    waiting.remove(waiter)
                if not waiting:
                    listing.waiters.pop(name, None)
        return waiter.secret

    async def _list(self, namespace: str, listing: _Listing) -> None:
        self.lists += 1
        served = 0
        try:
            pages = self._client.pages(SECRETS, namespace=namespace, limit=self._page)
            async with contextlib.aclosing(pages):
                async for items in pages:
                    for secret in items:
                        name = str(metadata_of(secret).get("name", ""))
                        listing.passed.add(name)
                        for waiter in listing.waiters.pop(name, ()):
                            waiter.secret = secret
                            waiter.done.set()
                            served += 1
        except errors.Forbidden:
            self._refused[namespace] = trio.current_time() + self._refused_for
            log.info(
                "may not list Secrets in namespace %s; its kubeconfigs are read one by one",
                namespace,
            )
        except errors.KubeError as exc:
            log.info(
                "listing Secrets in namespace %s failed (%s); the reads left are made one by one",
                namespace,
                type(exc).__name__,
            )
        finally:
            self.listed += served
            self._sizes[namespace] = len(listing.passed)
            del self._listings[namespace]
            for waiting in listing.waiters.values():
                for waiter in waiting:
                    waiter.done.set()  # not in the list (or it failed): a GET of its own
            log.debug("listed Secrets in namespace %s: %d reads served", namespace, served)
