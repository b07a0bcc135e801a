"""A ClusterSource's status: what it matched and made, what it could not, and when to write it.

Counted once the plan's writes are done (a refused create is listed, not counted), bounded
(``status.notImported`` lists :data:`MAX_LISTED` at most) and written only when it changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from kokumi.core.reasons import Reason
from kokumi.core.sources.plan import NotImported, Plan
from kokumi.core.sources.spec import ClusterSource, SourceInvalid

__all__ = ["MAX_LISTED", "SourceStatus", "status_of", "status_patch"]

MAX_LISTED: Final = 50
"""``status.notImported`` lists this many Secrets at most (by name); ``more`` counts the rest."""

_NOT_USABLE: Final = frozenset(
    {
        Reason.INVALID_KUBECONFIG,
        Reason.SECRET_KEY_NOT_FOUND,
        Reason.SECRET_NOT_READABLE,
        Reason.SECRET_NOT_OWNED,
        Reason.INVALID_CLUSTER_NAME,
    }
)


@attrs.frozen
class SourceStatus:
    observed_generation: int
    ready: bool
    reason: Reason
    message: str
    matched: int = 0
    made: int = 0
    not_usable: int = 0
    conflicts: int = 0
    not_imported: tuple[NotImported, ...] = ()

    def to_json(self, last_transition_time: str) -> dict[str, Any]:
        listed = self.not_imported[:MAX_LISTED]
        status: dict[str, Any] = {
            "observedGeneration": self.observed_generation,
            "matched": self.matched,
            "made": self.made,
            "notUsable": self.not_usable,
            "conflicts": self.conflicts,
            "notImported": [entry.to_json() for entry in listed],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if self.ready else "False",
                    "reason": str(self.reason),
                    "message": self.message,
                    "lastTransitionTime": last_transition_time,
                    "observedGeneration": self.observed_generation,
                }
            ],
        }
        if len(self.not_imported) > MAX_LISTED:
            status["more"] = len(self.not_imported) - MAX_LISTED
        return status


def status_of(
    source: ClusterSource | SourceInvalid, decided: Plan | None, failed: Mapping[str, str]
) -> SourceStatus:
    """The status once the plan's writes are done; ``failed`` maps a Cluster to its refused write.

    A Cluster whose create failed is not made; one whose update or delete failed still is.
    """
    if isinstance(source, SourceInvalid):
        return SourceStatus(source.generation, False, source.reason, source.message)
    assert decided is not None
    generation = source.generation
    if decided.blocked is not None:
        reason, message = decided.blocked
        return SourceStatus(generation, False, reason, message, made=len(decided.kept))
    entries = list(decided.not_imported)
    for desired in (*decided.create, *decided.update):
        refused = failed.get(desired.name)
        if refused is not None:
            entries.append(
                NotImported(desired.secret, desired.name, Reason.CLUSTER_WRITE_FAILED, refused)
            )
    created = sum(1 for d in decided.create if d.name not in failed)
    gone = sum(1 for name in decided.delete if name not in failed)
    made = created + len(decided.update) + len(decided.kept) + len(decided.delete) - gone
    entries.sort(key=lambda e: (e.secret, e.reason))
    conflicts = sum(1 for e in entries if e.reason is Reason.CLUSTER_CONFLICT)
    not_usable = sum(1 for e in entries if e.reason in _NOT_USABLE)
    noun = source.noun()
    if not entries:
        message = (
            f"{decided.matched} {noun} matched, each with its Cluster"
            if decided.matched
            else (_NONE_CAPI if source.shape is None else source.shape.none_matched())
        )
        return SourceStatus(
            generation, True, Reason.READY, message, decided.matched, made, not_usable, conflicts
        )
    message = (
        f"{len(entries)} of {decided.matched} matched {noun} have no "
        f"usable Cluster of this source ({conflicts} in conflict, {not_usable} not usable): "
        "see status.notImported"
    )
    reason = Reason.NOT_ALL_IMPORTED
    if decided.bounded:
        # A bound that cuts comes first: it is the manager's, and no edit of one Secret helps.
        reason = decided.bounded[0][0]
        message = "; ".join([*(line for _, line in decided.bounded), message])
    return SourceStatus(
        generation,
        False,
        reason,
        message,
        decided.matched,
        made,
        not_usable,
        conflicts,
        tuple(entries),
    )


_NONE_CAPI: Final = (
    "no Cluster API kubeconfig Secret of this namespace matches: Clusters appear here as Cluster "
    "API writes <cluster>-kubeconfig Secrets"
)


def status_patch(current: object, new: SourceStatus, now: str) -> dict[str, Any] | None:
    """The status to write, or None when the object's status says this already.

    The Ready condition's transition time moves only when its status does, so a source whose
    findings did not change is byte-identical to what it has, and nothing is written.
    """
    old = current if isinstance(current, Mapping) else {}
    stamp = now
    for condition in old.get("conditions") or ():
        if (
            isinstance(condition, Mapping)
            and condition.get("type") == "Ready"
            and condition.get("status") == ("True" if new.ready else "False")
            and condition.get("lastTransitionTime")
        ):
            stamp = str(condition["lastTransitionTime"])
    wanted = new.to_json(stamp)
    if {k: old.get(k) for k in (*wanted, "more")} == {**{"more": None}, **wanted}:
        return None
    if "more" not in wanted and "more" in old:
        wanted["more"] = None  # null: left out of the status written
    return wanted
