"""Kokumi's Cluster and Environment as typed values, and the converter to and from the API's dicts.

Pure: no I/O, no Trio. Reading an object never raises on what a user wrote: a Cluster or an
Environment that does not fit the schema (the CRD validates, but objects from before a schema change
or written with validation off can still be anything) becomes an ``Invalid`` with a one-line
message, which the actors put into the status instead of crashing.
"""

from __future__ import annotations

import datetime
import re
import time
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final, Literal, TypeVar

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from kokumi.core.limits import over_bounds
from kokumi.core.reasons import Reason
from kokumi.objects import Resource, metadata_of

__all__ = [
    "CLUSTERS",
    "ENVIRONMENTS",
    "FINALIZER",
    "GROUP",
    "IN_CLUSTER_LABEL",
    "VERSION",
    "Cluster",
    "ClusterSpec",
    "ClusterStatus",
    "Condition",
    "Environment",
    "EnvironmentSpec",
    "EnvironmentStatus",
    "Invalid",
    "Meta",
    "Scope",
    "SecretRef",
    "TargetStatus",
    "converter",
    "parse_cluster",
    "parse_environment",
    "ready_condition",
    "set_condition",
    "unstructured",
]

GROUP: Final = "delivery.kokumi.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
IN_CLUSTER_LABEL: Final = "delivery.kokumi.dev/in-cluster"
FINALIZER: Final = "delivery.kokumi.dev/argocd-registration"

_NO_ANNOTATIONS: Final[Mapping[str, str]] = MappingProxyType({})
_DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")

ConnectionKind = Literal["Kubeconfig", "InCluster"]
ConditionStatus = Literal["True", "False", "Unknown"]


@attrs.frozen
class Meta:
    name: str
    namespace: str
    uid: str = ""
    generation: int = 0
    resource_version: str = ""
    labels: Mapping[str, str] = attrs.field(factory=dict)
    finalizers: tuple[str, ...] = ()
    deletion_timestamp: str | None = None
    #: Only the annotations the parse was asked to keep (those a registration may carry): the
    #: rest, kubectl's last-applied-configuration among them, would cost memory times the fleet.
    annotations: Mapping[str, str] = attrs.field(default=_NO_ANNOTATIONS)


@attrs.frozen
class SecretRef:
    name: str
    key: str = "value"


@attrs.frozen
class KubeconfigSource:
    secret_ref: SecretRef
    context: str | None = None  # None: the kubeconfig's current context


@attrs.frozen
class Scope:
    """Where Argo CD may work on the cluster: what its cluster Secret says as ``namespaces`` and
    ``clusterResources``, for a credential that may not list everything cluster-wide."""

    namespaces: tuple[str, ...] = ()
    cluster_resources: bool = False


@attrs.frozen
class ClusterSpec:
    connection: ConnectionKind
    kubeconfig: KubeconfigSource | None = None
    description: str = ""
    scope: Scope | None = None


@attrs.frozen
class Condition:
    type: str
    status: ConditionStatus
    reason: str
    message: str
    last_transition_time: str = ""
    observed_generation: int = 0


@attrs.frozen
class ClusterStatus:
    server: str | None = None
    kubernetes_version: str | None = None
    observed_generation: int | None = None
    conditions: tuple[Condition, ...] = ()


@attrs.frozen
class Cluster:
    metadata: Meta
    spec: ClusterSpec
    status: ClusterStatus = ClusterStatus()

    @property
    def secret_ref(self) -> SecretRef | None:
        if self.spec.connection == "Kubeconfig" and self.spec.kubeconfig is not None:
            return self.spec.kubeconfig.secret_ref
        return None

    @property
    def kubeconfig_context(self) -> str | None:
        """The context the Cluster reads of its kubeconfig; None: the current one."""
        if self.spec.connection == "Kubeconfig" and self.spec.kubeconfig is not None:
            return self.spec.kubeconfig.context
        return None

    @property
    def ready(self) -> Condition | None:
        return ready_condition(self.status.conditions)


@attrs.frozen
class EnvironmentSpec:
    cluster_selector: Mapping[str, Any] | None = None
    description: str = ""
    delivery: Literal["ArgoCD"] = "ArgoCD"


@attrs.frozen
class TargetStatus:
    name: str
    target: Literal[Reason.DEPLOY, Reason.CLUSTER_NOT_READY, Reason.CLUSTER_CONFLICT]
    reason: str
    message: str


@attrs.frozen
class EnvironmentStatus:
    observed_generation: int | None = None
    conditions: tuple[Condition, ...] = ()
    selected: int = 0
    deploying: int = 0
    clusters: tuple[TargetStatus, ...] = ()
    more: int = 0


@attrs.frozen
class Environment:
    metadata: Meta
    spec: EnvironmentSpec
    status: EnvironmentStatus = EnvironmentStatus()


@attrs.frozen
class Invalid:
    """An object that does not fit the schema: what is wrong, in one line, for its status."""

    metadata: Meta
    message: str
    #: The status as the object has it, read leniently: an invalid object still keeps its
    #: condition's transition time, so re-reporting the same problem writes nothing.
    status: ClusterStatus | EnvironmentStatus | None = None
    #: What its Ready condition says: a spec that does not fit, or metadata over the bounds
    #: (:mod:`kokumi.core.limits`), which the manager does not keep.
    reason: Reason = Reason.INVALID_SPEC


# --- the converter ------------------------------------------------------------------------------


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


converter: Final = cattrs.Converter(forbid_extra_keys=False, omit_if_default=True)

_CLASSES: Final = (
    Meta,
    SecretRef,
    KubeconfigSource,
    Scope,
    ClusterSpec,
    Condition,
    ClusterStatus,
    Cluster,
    EnvironmentSpec,
    TargetStatus,
    EnvironmentStatus,
    Environment,
)

_WHOLE: Final = (ClusterStatus, EnvironmentStatus, TargetStatus)
"""Unstructured with every field, an unset one as null: the status is compared and sized as the
whole it replaces (the write leaves the nulls out). Everything else leaves out what is at its
default, as a condition without a transition time."""

for _cls in _CLASSES:
    _renames: dict[str, Any] = {a.name: override(rename=_camel(a.name)) for a in attrs.fields(_cls)}
    converter.register_structure_hook(_cls, make_dict_structure_fn(_cls, converter, **_renames))
    converter.register_unstructure_hook(
        _cls,
        make_dict_unstructure_fn(
            _cls, converter, _cattrs_omit_if_default=_cls not in _WHOLE, **_renames
        ),
    )
converter.register_structure_hook_func(
    lambda t: t == Mapping[str, str], lambda v, _: _string_map(v)
)
converter.register_structure_hook_func(
    lambda t: t == Mapping[str, Any], lambda v, _: dict(v) if v is not None else {}
)
converter.register_unstructure_hook_func(
    lambda t: t in (Mapping[str, str], Mapping[str, Any]), dict
)


def _string_map(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise TypeError("expected a map of strings")
    return dict(value)


def _meta(
    obj: Mapping[str, Any],
    *,
    labels: bool = True,
    annotations: Callable[[str], bool] | None = None,
) -> Meta:
    """The metadata, read leniently: whatever else is wrong, we need a name to report it on.

    Without ``labels`` for an object over the bounds: its labels are never copied. Only the
    annotations whose key ``annotations`` accepts are kept (none without it)."""
    raw = metadata_of(obj)
    labels_of = raw.get("labels") if labels else None
    finalizers = raw.get("finalizers")
    kept = _NO_ANNOTATIONS
    annotations_of = raw.get("annotations") if labels and annotations is not None else None
    if isinstance(annotations_of, Mapping) and annotations is not None:
        picked = {
            k: str(v) for k, v in annotations_of.items() if isinstance(k, str) and annotations(k)
        }
        kept = picked or _NO_ANNOTATIONS
    return Meta(
        name=str(raw.get("name", "")),
        namespace=str(raw.get("namespace", "")),
        uid=str(raw.get("uid", "")),
        generation=raw["generation"] if isinstance(raw.get("generation"), int) else 0,
        resource_version=str(raw.get("resourceVersion", "")),
        labels=(
            {str(k): str(v) for k, v in labels_of.items()} if isinstance(labels_of, Mapping) else {}
        ),
        finalizers=tuple(str(f) for f in finalizers) if isinstance(finalizers, list) else (),
        deletion_timestamp=raw.get("deletionTimestamp") or None,
        annotations=kept,
    )


_T = TypeVar("_T")


def _structure(value: object, cls: type[_T], default: _T) -> _T:
    if value is None:
        return default
    return converter.structure(value, cls)


def _why(exc: BaseException) -> str:
    """The first leaf of a cattrs error group, as a short phrase without the offending value."""
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            note = next(iter(getattr(sub, "__notes__", [])), "")
            where = note.removeprefix("Structuring class ").removeprefix("Structuring ")
            inner = _why(sub)
            return f"{where}: {inner}" if where else inner
    text = type(exc).__name__
    if isinstance(exc, KeyError):
        return f"missing field {exc.args[0]!s}"
    return text


def _too_large(obj: Mapping[str, Any]) -> Invalid | None:
    """An object over the bounds of tenant metadata, as an ``ObjectTooLarge`` Invalid: checked,
    selected and registered by nothing until its metadata is cut back."""
    why = over_bounds(obj)
    if why is None:
        return None
    return Invalid(_meta(obj, labels=False), why, reason=Reason.OBJECT_TOO_LARGE)


def parse_cluster(
    obj: Mapping[str, Any], *, annotations: Callable[[str], bool] | None = None
) -> Cluster | Invalid:
    """The Cluster typed, or why it is Invalid; ``annotations``: which annotation keys to keep."""
    parsed = _too_large(obj) or _parse_cluster(obj, annotations)
    if isinstance(parsed, Invalid):
        return attrs.evolve(parsed, status=_lenient(obj.get("status"), ClusterStatus))
    return parsed


def _parse_cluster(
    obj: Mapping[str, Any], annotations: Callable[[str], bool] | None
) -> Cluster | Invalid:
    meta = _meta(obj, annotations=annotations)
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return Invalid(meta, "spec is missing: set spec.connection to Kubeconfig or InCluster")
    connection = spec.get("connection")
    if connection not in ("Kubeconfig", "InCluster"):
        return Invalid(
            meta,
            f"spec.connection {connection!r} is not Kubeconfig or InCluster: set one of the two",
        )
    kubeconfig = spec.get("kubeconfig")
    secret_ref = kubeconfig.get("secretRef") if isinstance(kubeconfig, Mapping) else None
    if connection == "Kubeconfig":
        name = secret_ref.get("name") if isinstance(secret_ref, Mapping) else None
        key = secret_ref.get("key", "value") if isinstance(secret_ref, Mapping) else None
        if not isinstance(name, str) or not name:
            return Invalid(
                meta,
                "spec.kubeconfig.secretRef.name is missing: name the Secret of this namespace "
                "that holds the kubeconfig",
            )
        if not isinstance(key, str) or not key:
            return Invalid(
                meta,
                "spec.kubeconfig.secretRef.key is empty: name the key, or leave it out for value",
            )
    elif kubeconfig is not None:
        return Invalid(
            meta,
            "spec.kubeconfig is set on an InCluster Cluster: remove it, or use connection: "
            "Kubeconfig",
        )
    scope_problem = _scope_problem(connection, spec.get("scope"))
    if scope_problem is not None:
        return Invalid(meta, scope_problem)
    try:
        cluster_spec = converter.structure(spec, ClusterSpec)
    except Exception as exc:  # cattrs raises groups of anything a bad value provokes
        return Invalid(meta, f"the Cluster does not fit its schema ({_why(exc)}): fix the field")
    return Cluster(meta, cluster_spec, _lenient(obj.get("status"), ClusterStatus))


_MAX_SCOPE_NAMESPACES: Final = 64


def _scope_problem(connection: str, scope: object) -> str | None:
    """What is wrong with ``spec.scope``, as the CRD's schema and rules say, for an object written
    before the field's schema or with validation off; None when nothing is."""
    if scope is None:
        return None
    if connection == "InCluster":
        return (
            "spec.scope is set on an InCluster Cluster: Kokumi registers nothing for the "
            "cluster it runs in; remove spec.scope"
        )
    if not isinstance(scope, Mapping):
        return "spec.scope is not an object: set spec.scope.namespaces, a list of namespaces"
    namespaces = scope.get("namespaces", [])
    if not isinstance(namespaces, list) or not all(isinstance(n, str) for n in namespaces):
        return "spec.scope.namespaces is not a list of names: list the namespaces Argo CD may use"
    if len(namespaces) > _MAX_SCOPE_NAMESPACES:
        return (
            f"spec.scope.namespaces lists {len(namespaces)} namespaces, over "
            f"{_MAX_SCOPE_NAMESPACES}: grant the credential cluster-wide list and remove "
            "spec.scope"
        )
    for namespace in namespaces:
        if not _DNS_LABEL.fullmatch(namespace):
            return (
                f"spec.scope.namespaces has {namespace[:63]!r}, not a namespace name: use "
                "lower-case letters, digits and '-', at most 63"
            )
    if len(set(namespaces)) != len(namespaces):
        return "spec.scope.namespaces names a namespace twice: list each once"
    cluster_resources = scope.get("clusterResources", False)
    if not isinstance(cluster_resources, bool):
        return "spec.scope.clusterResources is not true or false: set one of the two"
    if cluster_resources and not namespaces:
        return (
            "spec.scope.clusterResources needs spec.scope.namespaces: name the namespaces or "
            "remove clusterResources"
        )
    return None


def _lenient(value: object, cls: type[_T]) -> _T:
    """A status we cannot read is one we will overwrite: treat it as empty rather than invalid."""
    try:
        return _structure(value, cls, cls())
    except Exception:
        return cls()


def parse_environment(obj: Mapping[str, Any]) -> Environment | Invalid:
    parsed = _too_large(obj) or _parse_environment(obj)
    if isinstance(parsed, Invalid):
        return attrs.evolve(parsed, status=_lenient(obj.get("status"), EnvironmentStatus))
    return parsed


def _parse_environment(obj: Mapping[str, Any]) -> Environment | Invalid:
    meta = _meta(obj)
    spec = obj.get("spec")
    if spec is None:
        spec = {}
    if not isinstance(spec, Mapping):
        return Invalid(meta, "spec is not an object: set spec.clusterSelector")
    delivery = spec.get("delivery", "ArgoCD")
    if delivery != "ArgoCD":
        return Invalid(
            meta, f"spec.delivery {delivery!r} is not supported: ArgoCD is the only way today"
        )
    selector = spec.get("clusterSelector")
    if selector is not None and not isinstance(selector, Mapping):
        return Invalid(
            meta, "spec.clusterSelector is not an object: use matchLabels/matchExpressions"
        )
    try:
        env_spec = EnvironmentSpec(
            cluster_selector=dict(selector) if selector is not None else None,
            description=str(spec.get("description", "")),
        )
    except Exception as exc:
        return Invalid(
            meta, f"the Environment does not fit its schema ({_why(exc)}): fix the field"
        )
    return Environment(meta, env_spec, _lenient(obj.get("status"), EnvironmentStatus))


# --- conditions ---------------------------------------------------------------------------------


_STAMP: tuple[int, str] = (-1, "")


def now_rfc3339() -> str:
    """The time now as a condition's transition time (whole seconds, UTC).

    Every check's status is built with one, mostly to find it unchanged: formatted once a
    second, since the format costs more than the rest of the comparison.
    """
    global _STAMP  # noqa: PLW0603
    second = int(time.time())
    if _STAMP[0] != second:
        stamp = datetime.datetime.fromtimestamp(second, datetime.UTC)
        _STAMP = (second, stamp.strftime("%Y-%m-%dT%H:%M:%SZ"))
    return _STAMP[1]


def ready_condition(conditions: Iterable[Condition]) -> Condition | None:
    return next((c for c in conditions if c.type == "Ready"), None)


def set_condition(
    conditions: Iterable[Condition], new: Condition, now: str | None = None
) -> tuple[Condition, ...]:
    """Replace the condition of ``new.type``; its transition time moves only when status does.

    That is the Kubernetes convention, and it is what keeps a quiet fleet's status byte-identical
    from one check to the next, so nothing is written.
    """
    old = next((c for c in conditions if c.type == new.type), None)
    if old is not None and old.status == new.status and old.last_transition_time:
        stamp = old.last_transition_time
    else:
        stamp = now or now_rfc3339()
    merged = attrs.evolve(new, last_transition_time=stamp)
    rest = [c for c in conditions if c.type != new.type]
    return (*rest, merged)


# --- resources ----------------------------------------------------------------------------------

CLUSTERS: Final = Resource(GROUP, VERSION, "clusters", "Cluster")
ENVIRONMENTS: Final = Resource(GROUP, VERSION, "environments", "Environment")


# --- the write ----------------------------------------------------------------------------------


def unstructured(status: ClusterStatus | EnvironmentStatus) -> dict[str, Any]:
    """The status as the API has it, for the write that replaces the status subresource whole.

    camelCase keys as the CRD names them; every field of the status, an unset one as null (the
    write leaves it out, so a server no kubeconfig names any more is gone); a condition without
    its unset transition time or generation.
    """
    result: dict[str, Any] = converter.unstructure(status)
    return result
