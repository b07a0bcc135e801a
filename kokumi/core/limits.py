"""The bounds of tenant-written metadata, and what the manager keeps of an object it follows.

Pure: no I/O. Whoever may create a Cluster, an Environment or a ClusterSource (or label a
Secret a source reads) writes its labels and annotations, and the API server accepts up to
about 1.5 MB of them: 31 Clusters of 90,000 labels each took the manager past its memory limit,
and a restart lists them again. So the manager keeps of each object only what it reads (no
annotations, which it never reads, and kubectl's last-applied-configuration copies the whole
object into one), and labels only within these bounds. An object over them is kept as a stub
(its identity, its finalizers, its status) that says why, so that its status can say so and a
fix is noticed; the admission policy ``kokumi-object-limits`` refuses such objects at the door
with the same numbers, and this holds where the policy is off or the object predates it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from kokumi.objects import kept_form, metadata_of

__all__ = [
    "ANNOTATIONS_MAX",
    "ANNOTATION_BYTES_MAX",
    "LABELS_MAX",
    "LABEL_BYTES_MAX",
    "OVER_BOUNDS",
    "judge",
    "kept",
    "over_bounds",
]

LABELS_MAX: Final = 64
"""Labels an object may carry: selectors need a handful, not thousands."""
LABEL_BYTES_MAX: Final = 16384
"""The label keys and values of one object, in UTF-8 bytes, in total."""
ANNOTATIONS_MAX: Final = 64
"""Annotations an object may carry."""
ANNOTATION_BYTES_MAX: Final = 131072
"""The annotation keys and values of one object, in UTF-8 bytes, in total: room for kubectl's
last-applied-configuration of any object within the other bounds."""

OVER_BOUNDS: Final = "kokumi.dev/overBounds"
"""The key of a kept stub that holds why the object was not kept: no API object has a
top-level field with a slash, so it never meets one the server wrote."""

# What a stub keeps of the metadata: enough to name the object, write its status on the right
# uid and version, release a finalizer, and tell a fixed object (a new resourceVersion).
_STUB_METADATA: Final = (
    "name",
    "namespace",
    "uid",
    "generation",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "finalizers",
)


def _size(entries: object) -> tuple[int, int]:
    """How many entries a labels or annotations map has, and their keys' and values' bytes."""
    if not isinstance(entries, Mapping):
        return 0, 0
    size = 0
    for key, value in entries.items():
        size += len(str(key).encode("utf-8", "surrogatepass"))
        size += len(str(value).encode("utf-8", "surrogatepass"))
    return len(entries), size


def judge(metadata: Mapping[str, Any], kind: str = "object") -> str | None:
    """Why ``metadata`` is over the bounds, in one line with the fix; None when within them.

    Counts only, never a key or value: a message goes into a status any reader of the object
    sees, and what a tenant wrote there is theirs to find.
    """
    over: list[str] = []
    parts: list[str] = []
    for field, entries, most, most_bytes in (
        ("labels", metadata.get("labels"), LABELS_MAX, LABEL_BYTES_MAX),
        ("annotations", metadata.get("annotations"), ANNOTATIONS_MAX, ANNOTATION_BYTES_MAX),
    ):
        count, size = _size(entries)
        if count > most or size > most_bytes:
            over.append(field)
            noun = "entry" if count == 1 else "entries"
            parts.append(
                f"metadata.{field} has {count} {noun} of {size} bytes "
                f"(at most {most} entries of {most_bytes} bytes)"
            )
    if not over:
        return None
    return (
        f"{'; '.join(parts)}: remove {' and '.join(over)} until the {kind} is within the "
        "bounds; Kokumi ignores it until then"
    )


def kept(
    obj: Mapping[str, Any], annotations: Callable[[str], bool] | None = None
) -> dict[str, Any]:
    """``obj`` as the manager keeps it while it follows it: its kept form without annotations
    (but those whose key ``annotations`` accepts: what a registration may carry), or, over the
    bounds, a stub that says why (see :func:`over_bounds`).

    Judged before anything is copied: the table of shared strings never sees a hostile label.
    """
    metadata = metadata_of(obj)
    why = judge(metadata, _kind(obj))
    if why is not None:
        stub: dict[str, Any] = {
            key: obj[key] for key in ("apiVersion", "kind") if isinstance(obj.get(key), str)
        }
        stub["metadata"] = {k: metadata[k] for k in _STUB_METADATA if k in metadata}
        # Its controller, if any (the API server allows one): a ClusterSource's Cluster stays
        # its source's, which then writes its labels back within the bounds.
        controllers = [
            ref
            for ref in metadata.get("ownerReferences") or ()
            if isinstance(ref, Mapping) and ref.get("controller") is True
        ][:1]
        if controllers:
            stub["metadata"]["ownerReferences"] = controllers
        # The spec and status, which the CRDs' schemas bound: what the object asks for and
        # what was said of it.
        for part in ("spec", "status"):
            if part in obj:
                stub[part] = obj[part]
        stub[OVER_BOUNDS] = why
        return kept_form(stub)
    if "annotations" in metadata:
        trimmed = {k: v for k, v in metadata.items() if k != "annotations"}
        found = metadata["annotations"]
        if annotations is not None and isinstance(found, Mapping):
            carried = {k: v for k, v in found.items() if isinstance(k, str) and annotations(k)}
            if carried:
                trimmed["annotations"] = carried
        obj = {**obj, "metadata": trimmed}
    return kept_form(obj)


def over_bounds(obj: Mapping[str, Any]) -> str | None:
    """Why ``obj`` is not kept whole (a stub's own word, or the judge's of an object as read);
    None when it is within the bounds."""
    why = obj.get(OVER_BOUNDS)
    if isinstance(why, str):
        return why
    return judge(metadata_of(obj), _kind(obj))


def _kind(obj: Mapping[str, Any]) -> str:
    """The object's kind for a message; a metadata-only read's says nothing of it."""
    kind = obj.get("kind")
    return kind if isinstance(kind, str) and kind and kind != "PartialObjectMetadata" else "object"
