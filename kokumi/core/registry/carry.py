"""What a registration carries onto its Argo CD Secret besides the connection: the labels and
annotations the platform team names, and which Environments select the Cluster.

Argo CD's ApplicationSet cluster generator selects clusters by the labels of their Secrets and hands
their labels and annotations to templates. The platform team says which of a Cluster's labels and
annotations mean something to its ApplicationSets (``--carry-labels fleet,example.com/*``); Kokumi
copies the matching ones, never one of its own keys or Argo CD's, which say what the Secret is and
who holds it. Nothing is carried unless named, so a fleet that names nothing writes the Secrets it
always wrote.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Final

import attrs

from kokumi.core import api

__all__ = [
    "ENVIRONMENT_LABEL_PREFIX",
    "NOTHING",
    "NOT_CARRYING",
    "NO_EXTRAS",
    "Carry",
    "Carrying",
    "Extras",
    "environment_label",
    "extras_of",
    "is_reserved",
]

ENVIRONMENT_LABEL_PREFIX: Final = "environment.delivery.kokumi.dev/"
"""``environment.delivery.kokumi.dev/<Environment>: "true"`` on the Secret, one per Environment of
the holder's namespace that selects it: what an ApplicationSet selects "the clusters of edge" by."""

_RESERVED_DOMAINS: Final = ("kokumi.dev", "argocd.argoproj.io")
_RESERVED_KEYS: Final = frozenset({"app.kubernetes.io/managed-by"})
# A label key: an optional DNS-subdomain prefix and '/', then a name of at most 63 characters.
_KEY_CHARS: Final = re.compile(r"[A-Za-z0-9._/-]+")
_NAME_SEGMENT: Final = 63
_HASHED_KEEP: Final = _NAME_SEGMENT - 17  # the name's head, '-' and 16 hex digits make 63


def is_reserved(key: str) -> bool:
    """Whether ``key`` is Kokumi's or Argo CD's: what says what the Secret is and who holds it.

    Any key under ``kokumi.dev`` or ``argocd.argoproj.io`` or one of their subdomains, and the
    ``app.kubernetes.io/managed-by`` label Kokumi's Secrets are known by.
    """
    if key in _RESERVED_KEYS:
        return True
    domain, slash, _ = key.partition("/")
    if not slash:
        return False
    domain = domain.lower()
    return any(domain == d or domain.endswith("." + d) for d in _RESERVED_DOMAINS)


@attrs.frozen
class Carry:
    """The platform team's allow-list: exact keys, and prefixes (a pattern ending in ``*``)."""

    keys: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()

    @classmethod
    def parse(cls, patterns: Iterable[str]) -> Carry:
        """The allow-list from ``fleet``, ``example.com/*``, ``topology.kubernetes.io/zone``...

        Comma-separated lists are split, blanks skipped. Raises ``ValueError`` with a one-line
        message for a pattern that cannot name a key or names only reserved ones, so that a
        manager started with it says so at once instead of carrying nothing.
        """
        keys: set[str] = set()
        prefixes: set[str] = set()
        for chunk in patterns:
            for raw in chunk.split(","):
                pattern = raw.strip()
                if not pattern:
                    continue
                stem = pattern.removesuffix("*")
                if not stem or "*" in stem or not _KEY_CHARS.fullmatch(stem):
                    raise ValueError(
                        f"{pattern[:80]!r} is not a label key or a prefix ending in *: name "
                        "keys such as fleet or prefixes such as example.com/*"
                    )
                if stem.count("/") > 1:
                    raise ValueError(f"{pattern[:80]!r} has more than one '/': a key has one")
                if is_reserved(stem) or (pattern.endswith("*") and is_reserved(stem + "x")):
                    raise ValueError(
                        f"{pattern[:80]!r} is Kokumi's or Argo CD's own: they say what the "
                        "Secret is and who holds it, and are never carried"
                    )
                if pattern.endswith("*"):
                    prefixes.add(stem)
                else:
                    keys.add(stem)
        return cls(frozenset(keys), tuple(sorted(prefixes)))

    def __bool__(self) -> bool:
        return bool(self.keys or self.prefixes)

    def matches(self, key: str) -> bool:
        """Whether ``key`` is carried: named, under a named prefix, and nobody's reserved key."""
        if key in self.keys or any(key.startswith(p) for p in self.prefixes):
            return not is_reserved(key)
        return False

    def pick(self, found: Mapping[str, str]) -> dict[str, str]:
        """The carried entries of ``found`` (a Cluster's labels or annotations), by key."""
        if not self:
            return {}
        return {k: found[k] for k in sorted(found) if self.matches(k)}

    def patterns(self) -> list[str]:
        """The allow-list as it is written, for a flag, a message or a report."""
        return sorted(self.keys) + [p + "*" for p in self.prefixes]


NOTHING: Final = Carry()


def environment_label(environment: str) -> str:
    """The label key that says the Environment ``environment`` selects the Cluster.

    A label key's name part holds at most 63 characters and an Environment's name up to 253;
    a longer name becomes its first 46 characters, ``-`` and the first 16 hex digits of the
    SHA-256 of the whole name: stable, documented in docs/argocd.md, and still readable.
    """
    if len(environment) <= _NAME_SEGMENT:
        return ENVIRONMENT_LABEL_PREFIX + environment
    digest = hashlib.sha256(environment.encode()).hexdigest()[:16]
    return f"{ENVIRONMENT_LABEL_PREFIX}{environment[:_HASHED_KEEP]}-{digest}"


def _pairs(found: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(found.items()))


@attrs.frozen
class Extras:
    """What a holder's registration carries beside its connection, as its Cluster actor claims it.

    The carried labels and annotations (already picked by the allow-lists), the Environments of
    the Cluster's namespace that select it, and its ``spec.scope``. Sorted tuples, so that two
    claims of the same Cluster compare equal and its Secret is written byte for byte the same:
    a claim whose extras did not change writes nothing.
    """

    labels: tuple[tuple[str, str], ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()
    environments: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()
    cluster_resources: bool = False

    def __bool__(self) -> bool:
        return bool(
            self.labels
            or self.annotations
            or self.environments
            or self.namespaces
            or self.cluster_resources
        )

    def secret_labels(self) -> dict[str, str]:
        """The Secret's labels beside Kokumi's four: the carried ones and one per Environment."""
        labels = dict(self.labels)
        for environment in self.environments:
            labels[environment_label(environment)] = "true"
        return labels


NO_EXTRAS: Final = Extras()
"""Nothing carried: one shared value, so that 10,000 Clusters that carry nothing cost nothing."""


def extras_of(
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    environments: Iterable[str],
    *,
    namespaces: Iterable[str] = (),
    cluster_resources: bool = False,
    carry_labels: Carry = NOTHING,
    carry_annotations: Carry = NOTHING,
) -> Extras:
    """The extras of a Cluster with these labels, annotations, selecting Environments and scope.

    Only what the allow-lists name is carried; ``clusterResources`` only with ``namespaces``,
    since Argo CD reads it only for a cluster limited to namespaces.
    """
    spaces = tuple(sorted(set(namespaces)))
    extras = Extras(
        labels=_pairs(carry_labels.pick(labels)),
        annotations=_pairs(carry_annotations.pick(annotations)),
        environments=tuple(sorted(set(environments))),
        namespaces=spaces,
        cluster_resources=bool(spaces) and cluster_resources,
    )
    return extras if extras else NO_EXTRAS


@attrs.frozen
class Carrying:
    """The manager's two allow-lists (``--carry-labels``, ``--carry-annotations``)."""

    labels: Carry = NOTHING
    annotations: Carry = NOTHING

    def extras(self, cluster: api.Cluster | api.Invalid, environments: Iterable[str]) -> Extras:
        """What ``cluster``'s registration carries, selected by ``environments``."""
        scope = cluster.spec.scope if isinstance(cluster, api.Cluster) else None
        return extras_of(
            cluster.metadata.labels,
            cluster.metadata.annotations,
            environments,
            namespaces=scope.namespaces if scope is not None else (),
            cluster_resources=scope.cluster_resources if scope is not None else False,
            carry_labels=self.labels,
            carry_annotations=self.annotations,
        )


NOT_CARRYING: Final = Carrying()
