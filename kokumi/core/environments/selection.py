"""Which Clusters each Environment of one namespace selects, kept up to date per change.

The Environments actor used to recompute a namespace from scratch after every change there:
parse, match and target every Cluster, 144 ms at 10,000 Clusters with the event loop blocked
for all of it. This index does the same work per changed Cluster instead. A Cluster that
changes is matched against each Environment's selector and moved in that Environment's
tallies; an Environment whose selector changes is rebuilt over the Clusters, which the actor
paces in chunks (:meth:`NamespaceIndex.set_environment` yields between them).

What an Environment's status needs comes out of the tallies without a walk over its Clusters:
how many it selects, how many deploy (one per server that has a deployable Cluster, the first
by name), and the first few by name of those that do not deploy.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

import attrs

from kokumi.core import api
from kokumi.core.environments import selectors, targets
from kokumi.core.environments.status import Summary

__all__ = ["Entry", "NamespaceIndex"]


@attrs.frozen
class Entry:
    """One valid Cluster as the index knows it: parsed once per resourceVersion."""

    cluster: api.Cluster
    selected: targets.SelectedCluster
    server: str | None  # targets.deploy_server: where it deploys unless another takes it

    @classmethod
    def of(cls, cluster: api.Cluster) -> Entry:
        selected = targets.selected_cluster(cluster)
        return cls(cluster, selected, targets.deploy_server(selected))

    @property
    def name(self) -> str:
        return self.cluster.metadata.name


class _Tally:
    """The Clusters one Environment selects, arranged so that a change costs O(log n)."""

    def __init__(self, selector: selectors.Selector) -> None:
        self.selector = selector
        self.members: dict[str, Entry] = {}
        # Per server, the names of the selected Clusters that could deploy there, sorted: the
        # first deploys, the others are held (TargetTaken).
        self.by_server: dict[str, list[str]] = {}
        # Names of the selected Clusters that do not deploy, sorted, for the status's first few.
        self.held: list[str] = []

    def add(self, entry: Entry) -> None:
        name = entry.name
        self.members[name] = entry
        if entry.server is None:
            _insert(self.held, name)
            return
        rivals = self.by_server.setdefault(entry.server, [])
        _insert(rivals, name)
        if rivals[0] != name:
            _insert(self.held, name)
        elif len(rivals) > 1:
            _insert(self.held, rivals[1])  # the former first is held now

    def remove(self, name: str) -> None:
        entry = self.members.pop(name, None)
        if entry is None:
            return
        if entry.server is None:
            _delete(self.held, name)
            return
        rivals = self.by_server[entry.server]
        first = rivals[0] == name
        _delete(rivals, name)
        if not first:
            _delete(self.held, name)
        elif rivals:
            _delete(self.held, rivals[0])  # the next by name deploys now
        if not rivals:
            del self.by_server[entry.server]

    def summary(self, listed: int) -> Summary:
        held: list[tuple[targets.Target, targets.SelectedCluster]] = []
        for name in self.held[:listed]:
            entry = self.members[name]
            taken_by = None if entry.server is None else self.by_server[entry.server][0]
            held.append((targets.target(entry.selected, taken_by), entry.selected))
        return Summary(len(self.members), len(self.by_server), held, len(self.held))


class NamespaceIndex:
    """The valid Clusters of one namespace and, per Environment with a valid selector, a tally.

    Every method is synchronous and leaves the index consistent, except while a generator of
    :meth:`set_environment` is suspended: the caller finishes it before reading that tally.
    """

    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}
        self._tallies: dict[str, _Tally] = {}
        self._chosen: dict[str, int] = {}  # Cluster name -> how many tallies hold it
        self.touched: set[str] = set()  # Clusters whose selection may have changed

    def selected(self, name: str) -> bool:
        """Whether at least one Environment with a valid selector selects Cluster ``name``."""
        return self._chosen.get(name, 0) > 0

    def selecting(self, name: str) -> tuple[str, ...]:
        """The Environments (with a valid selector) that select Cluster ``name``, sorted."""
        if not self.selected(name):
            return ()
        return tuple(sorted(e for e, tally in self._tallies.items() if name in tally.members))

    def selected_names(self) -> set[str]:
        return {name for name, count in self._chosen.items() if count > 0}

    def selector(self, environment: str) -> selectors.Selector | None:
        tally = self._tallies.get(environment)
        return None if tally is None else tally.selector

    def environments(self) -> list[str]:
        return list(self._tallies)

    def put(self, entry: Entry) -> None:
        """Cluster ``entry.name`` is now ``entry`` (new, or changed)."""
        self.remove(entry.name)
        self.entries[entry.name] = entry
        labels = entry.cluster.metadata.labels
        for tally in self._tallies.values():
            if tally.selector.matches(labels):
                tally.add(entry)
                self._count(entry.name, 1)
        self.touched.add(entry.name)

    def remove(self, name: str) -> None:
        """Cluster ``name`` is gone, or no longer valid."""
        if self.entries.pop(name, None) is None:
            return
        for tally in self._tallies.values():
            if name in tally.members:
                tally.remove(name)
                self._count(name, -1)
        self.touched.add(name)

    def drop_environment(self, environment: str) -> None:
        tally = self._tallies.pop(environment, None)
        if tally is not None:
            for name in tally.members:
                self._count(name, -1)
                self.touched.add(name)

    def set_environment(
        self, environment: str, selector: selectors.Selector, *, chunk: int = 500
    ) -> Iterator[None]:
        """Rebuild the tally of ``environment`` for ``selector``, yielding every ``chunk`` Clusters.

        The new tally replaces the old one only when complete. No other method may be called
        while the generator is suspended: the actor that owns the index runs the rebuild to its
        end before it looks at changes again.
        """
        tally = _Tally(selector)
        for done, entry in enumerate(list(self.entries.values()), start=1):
            if selector.matches(entry.cluster.metadata.labels):
                tally.add(entry)
            if done % chunk == 0:
                yield
        self.drop_environment(environment)
        self._tallies[environment] = tally
        for name in tally.members:
            self._count(name, 1)
            self.touched.add(name)

    def summary(self, environment: str, listed: int) -> Summary:
        return self._tallies[environment].summary(listed)

    def _count(self, name: str, delta: int) -> None:
        count = self._chosen.get(name, 0) + delta
        if count > 0:
            self._chosen[name] = count
        else:
            self._chosen.pop(name, None)


def _insert(names: list[str], name: str) -> None:
    bisect.insort(names, name)


def _delete(names: list[str], name: str) -> None:
    index = bisect.bisect_left(names, name)
    if index < len(names) and names[index] == name:
        del names[index]
