"""Reads of kubeconfig Secrets: one GET each, or one paged list when many wait in one namespace.

Every Cluster actor reads its kubeconfig Secret (the Secret watch is metadata only), and so does
the ClusterSources actor for each Secret it imports. In the steady state these reads are few and
spread out, and a GET each is right: eight at a time (``at_a_time``), so that the hub never gets
thousands at once.

After a restart they are not: every actor reads its Secret together, since its registration
needs the connection even when its status's finding serves as its first check. At 10,000
Clusters the hub served 83 GETs a second, so the last reads came two minutes after the restart
and the Clusters behind them missed their place in the minute. So when ``batch_at`` reads of one
namespace wait together, one list of the namespace's Secrets, in pages of ``page``, serves them:
each page's Secrets go to the reads waiting for them and the page is dropped (the data of
Secrets nobody waits for is never kept). A list waits :data:`GATHER` before its first page, so
that the rest of the burst that started it joins it. A list's pages are one snapshot, taken when
it asks for its first, so a read that comes later waits for the next list, which begins when
this one ends (if enough wait for it; else they are GETs), unless a page of the running list
holds its Secret in the version that the Secret watch holds as the page arrives (``versions``;
the watch knows every Secret's resourceVersion): then the Secret did not change between the
snapshot and what the watch last told, and a change it tells later makes the Cluster read
again, as after any read. No read is ever served older data than a GET made when it began
would give. A namespace listed before is listed again only for a
share of its Secrets (:data:`LIST_SHARE`), but the reads a list left (they came after their
page went by) get the next list whatever their share: they have waited one list already, and
that list ends once it has served them (the reads a second list leaves are held to the share
again: while Clusters are created, reads keep coming for Secrets younger than any list, and
each list left some for the next, so onboarding 10,000 Clusters made 1,969 lists of the whole
namespace). The namespace's size is what the Secret watch holds (:class:`SecretVersions`);
before it has listed, the size the last list saw. A list ends, too, as soon as no read waits
for it.
A list refused (the manager may get but not list
there) or failed leaves its reads to GET one by one, and a refused namespace is not listed again
for five minutes; the failure is one log line. So does a page
larger than :data:`PAGE_BYTES`: a namespace whose author keeps big Secrets beside the
kubeconfigs costs the manager GETs, never a hundred megabytes at once.

A list reads Secrets that no Cluster names too, with the same RBAC as the Secret watch's: the
manager may already list every Secret where it follows them.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Iterable, Iterator, MutableMapping

import attrs
import trio

from kokumi.core.cluster import schedule
from kokumi.kube import errors
from kokumi.kube.client import Client
from kokumi.kube.resources import SECRETS
from kokumi.kube.wire import Obj
from kokumi.objects import metadata_of, resource_version

__all__ = ["BATCH_AT", "GATHER", "PAGE", "PAGE_BYTES", "SecretReads", "SecretVersions"]

log = logging.getLogger(__name__)

BATCH_AT = schedule.SECRET_LIST_AT

PAGE = 100
"""Secrets per page of a list: about half a megabyte of JSON for kubeconfigs of a few kB, which
the loop decodes in a few milliseconds (a page of 500 took one step of 660 ms at 10,000)."""

PAGE_BYTES = 4 * 1024 * 1024
"""The most of one page the manager reads. A namespace's author chooses its Secrets' sizes (a
Secret may hold 1 MiB), and a page of a hundred of those would be a hundred megabytes to hold
and decode at once; a page over this ends the list, and its reads are GETs, eight at a time."""

LIST_SHARE = 16
"""A namespace whose size is known is listed only when a sixteenth of its Secrets wait: a list
of S Secrets costs the hub about what S/16 GETs do, so a namespace of 10,000 Secrets with a few
hundred reads waiting is read by GETs."""

REFUSED_FOR = 300.0
"""Seconds a namespace whose list was refused is read by GETs only."""

GATHER = 0.1
"""Seconds a list waits before it asks for its first page. The reads that start it come in a
burst (a restart's actors all read at once, over many steps of the loop); those of the burst
that come in a step after the list asked would wait for the next list or read by GET, and how
many do is a matter of the loop's order. A tenth of a second lets the whole burst join."""


Key = tuple[str, str]


class SecretVersions(MutableMapping[Key, str]):
    """(namespace, name) -> resourceVersion of every Secret the Secret watches follow, and how
    many each namespace holds.

    The watches write it, the Cluster actors compare their reads with it, and the reads weigh a
    list of a namespace against its size with it: a count kept as keys come and go, since the
    reads ask on every burst and counting 10,000 keys each time would cost more than the GETs.
    """

    def __init__(self, items: Iterable[tuple[Key, str]] = ()) -> None:
        self._items: dict[Key, str] = {}
        self._counts: Counter[str] = Counter()
        self.update(items)

    def __getitem__(self, key: Key) -> str:
        return self._items[key]

    def __setitem__(self, key: Key, version: str) -> None:
        if key not in self._items:
            self._counts[key[0]] += 1
        self._items[key] = version

    def __delitem__(self, key: Key) -> None:
        del self._items[key]
        left = self._counts[key[0]] - 1
        if left:
            self._counts[key[0]] = left
        else:
            del self._counts[key[0]]

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[Key]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def in_namespace(self, namespace: str) -> int:
        """How many Secrets of ``namespace`` the watches hold: 0 before its first list."""
        return self._counts.get(namespace, 0)


@attrs.define(eq=False)
class _Waiter:
    done: trio.Event = attrs.field(factory=trio.Event)
    #: The Secret as the list gave it; None when the list did not serve it (read it alone).
    secret: Obj | None = None


@attrs.define(eq=False)
class _Listing:
    waiters: dict[str, list[_Waiter]] = attrs.field(factory=dict)
    #: Its first page was asked for. Every page of a list is of the first one's snapshot (the
    #: continue token carries its resourceVersion), so a read that comes after waits for the
    #: next list: it could be handed a Secret older than the read, perhaps the very version
    #: whose change made it read. Only a page whose version of it the watch holds serves it.
    sent: bool = False
    #: It serves the reads an earlier list left: those it leaves are held to the share.
    follows: bool = False


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
        page_bytes: int = PAGE_BYTES,
        refused_for: float = REFUSED_FOR,
        gather: float = GATHER,
        versions: SecretVersions | None = None,
    ) -> None:
        self._client = client
        #: (namespace, name) -> resourceVersion, as the Secret watch holds them now.
        self._versions = SecretVersions() if versions is None else versions
        #: The GETs in flight, at most ``at_a_time``.
        self.limiter = trio.CapacityLimiter(at_a_time)
        self._batch_at = batch_at
        self._page = page
        self._page_bytes = page_bytes
        self._refused_for = refused_for
        self._gather = gather
        self._queued: Counter[str] = Counter()  # namespace -> GETs waiting for the limiter
        self._listings: dict[str, _Listing] = {}  # namespace -> the list running there
        self._next: dict[str, _Listing] = {}  # namespace -> reads waiting for the next list
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
        listing = self._listing_for(namespace)
        if listing is not None:
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

    def _listing_for(self, namespace: str) -> _Listing | None:
        """The list a read of ``namespace`` waits for, if one serves it; None: a GET."""
        running = self._listings.get(namespace)
        if running is None:
            return self._list_if_worth_it(namespace, self._queued[namespace] + 1)
        if not running.sent:
            return running
        # The running list's snapshot is older than this read: the next list's is not. Whether
        # there is one is told when the running one ends (see _then).
        return self._next.setdefault(namespace, _Listing())

    def _list_if_worth_it(
        self, namespace: str, waiting: int, listing: _Listing | None = None, *, share: bool = True
    ) -> _Listing | None:
        """Start ``listing`` (a new one if None) when ``waiting`` reads make it worth it."""
        nursery = self._nursery
        if nursery is None or not self._worth_it(namespace, waiting, share=share):
            return None
        self._refused.pop(namespace, None)
        listing = self._listings[namespace] = listing or _Listing()
        nursery.start_soon(self._list, namespace, listing)
        return listing

    def _worth_it(self, namespace: str, waiting: int, *, share: bool = True) -> bool:
        if waiting < self._batch_at:
            return False
        size = self._versions.in_namespace(namespace) or self._sizes.get(namespace, 0)
        if share and waiting < size / LIST_SHARE:
            return False
        return self._refused.get(namespace, -float("inf")) <= trio.current_time()

    def _current(self, late: _Listing, namespace: str, name: str, secret: Obj) -> bool:
        """Whether ``secret``, of a list's snapshot, may serve the reads of it in ``late``: the
        Secret watch holds this very version now."""
        if name not in late.waiters:
            return False
        return self._versions.get((namespace, name)) == resource_version(secret)

    def _then(self, namespace: str, ended: _Listing) -> None:
        """A list ended: the reads that came while it ran get the next one, or their GETs."""
        waiting = self._next.pop(namespace, None)
        if waiting is None or not waiting.waiters:
            return
        count = sum(len(w) for w in waiting.waiters.values())
        # Not by the share: these reads have waited a whole list already, and GETs eight at a
        # time are slower than the next list, which ends once it has served them (591 reads
        # left by a restart's list of 10,000 took 45 s of GETs; their Clusters' gaps 105 s).
        # Once only, though: the reads a follow-up leaves are new Clusters' while they are
        # being created, not a restart's, and each list would leave some for the next.
        waiting.follows = not ended.follows
        if self._list_if_worth_it(namespace, count, waiting, share=ended.follows) is None:
            _release(waiting)

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
        served = size = 0
        whole = False
        try:
            await trio.sleep(self._gather)
            pages = self._client.pages(
                SECRETS, namespace=namespace, limit=self._page, max_bytes=self._page_bytes
            )
            listing.sent = True
            async with contextlib.aclosing(pages):
                async for items in pages:
                    size += len(items)
                    late = self._next.get(namespace)  # the reads that came after the snapshot
                    for secret in items:
                        name = str(metadata_of(secret).get("name", ""))
                        served += _serve(listing, name, secret)
                        if late is not None and self._current(late, namespace, name, secret):
                            served += _serve(late, name, secret)
                    if not listing.waiters and not (late is not None and late.waiters):
                        break  # nobody waits: the pages left are the hub's work for nothing
                else:
                    whole = True
        except errors.Forbidden:
            self._refused[namespace] = trio.current_time() + self._refused_for
            log.info(
                "may not list Secrets in namespace %s; its kubeconfigs are read one by one",
                namespace,
            )
        except errors.TooLarge:
            self._refused[namespace] = trio.current_time() + self._refused_for
            log.info(
                "a page of Secrets in namespace %s is over %d bytes; its kubeconfigs are read"
                " one by one",
                namespace,
                self._page_bytes,
            )
        except errors.KubeError as exc:
            log.info(
                "listing Secrets in namespace %s failed (%s); the reads left are made one by one",
                namespace,
                type(exc).__name__,
            )
        finally:
            self.listed += served
            if whole or size > self._sizes.get(namespace, 0):
                self._sizes[namespace] = size
            del self._listings[namespace]
            _release(listing)  # not in the list (or it failed): a GET of its own each
            log.debug("listed Secrets in namespace %s: %d reads served", namespace, served)
            self._then(namespace, listing)


def _serve(listing: _Listing, name: str, secret: Obj) -> int:
    """Hand ``secret`` to the reads of ``listing`` that wait for it; how many."""
    waiting = listing.waiters.pop(name, ())
    for waiter in waiting:
        waiter.secret = secret
        waiter.done.set()
    return len(waiting)


def _release(listing: _Listing) -> None:
    """Every read still waiting for ``listing`` reads by GET."""
    for waiting in listing.waiters.values():
        for waiter in waiting:
            waiter.done.set()
    listing.waiters.clear()
