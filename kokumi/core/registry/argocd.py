"""The declarative cluster Secret through which Argo CD learns a Cluster's connection.

Argo CD reads every Secret in its namespace labelled ``argocd.argoproj.io/secret-type: cluster``:
``server``, ``name`` and a ``config`` JSON holding the credentials. The Secret is named after the
server so that the API server's atomic ``create`` lets only one Cluster, of any namespace, register
a server, and its labels say which Cluster that is, so that the registry can rebuild who holds what
after a restart.

Everything here is deterministic down to the byte: the registry compares the Secret it would write
with the one it reads back and writes nothing when they are equal, so a quiet fleet costs no API
writes.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.registry.carry import ENVIRONMENT_LABEL_PREFIX, NO_EXTRAS, Extras
from kokumi.core.registry.ownership import (
    IN_CLUSTER_SERVER,
    ClusterRef,
    is_argocd_own,
    normalise_server,
)
from kokumi.core.text import b64
from kokumi.objects import secret_data

__all__ = [
    "ANNOTATION_CARRIED_ANNOTATIONS",
    "ANNOTATION_CARRIED_LABELS",
    "ARGOCD_NAMESPACE",
    "IN_CLUSTER_SERVER",
    "LABEL_CLUSTER",
    "LABEL_CLUSTER_NAMESPACE",
    "LABEL_MANAGED_BY",
    "LABEL_SECRET_TYPE",
    "MANAGED_BY",
    "cluster_config",
    "cluster_name",
    "cluster_secret",
    "config_from_secret",
    "carried_annotation_keys",
    "carried_label_keys",
    "holder_of",
    "is_ours",
    "normalise_server",
    "secret_name",
    "server_hash",
    "server_of",
    "updated",
]

ARGOCD_NAMESPACE = "argocd"
LABEL_SECRET_TYPE = "argocd.argoproj.io/secret-type"  # noqa: S105 - a label key, no password
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_CLUSTER = "delivery.kokumi.dev/cluster"
LABEL_CLUSTER_NAMESPACE = "delivery.kokumi.dev/cluster-namespace"
MANAGED_BY = "kokumi"
ANNOTATION_CARRIED_LABELS = "delivery.kokumi.dev/carried-labels"
"""The keys of the labels Kokumi carried onto the Secret, comma-separated: the labels it removes
when the holder stops carrying them (any other label somebody put there stays)."""
ANNOTATION_CARRIED_ANNOTATIONS = "delivery.kokumi.dev/carried-annotations"
"""The keys of the annotations Kokumi carried onto the Secret, likewise."""
_SECRET_TYPE_CLUSTER = "cluster"  # noqa: S105 - a label value, no password


@functools.lru_cache(maxsize=1 << 16)
def server_hash(server: str) -> str:
    """Sixteen hex digits of the server's SHA-256: short enough for a name, yet unique.

    Hashed in its normalised form, since Argo CD treats ``https://x/`` and ``https://x`` as one
    server and they must therefore land in one Secret. Remembered: the registry names a
    server's Secret several times for every claim it serves, a fleet's checks each making one.
    """
    return hashlib.sha256(normalise_server(server).encode()).hexdigest()[:16]


def secret_name(server: str) -> str:
    """The name of the one Secret that may register ``server``, whichever Cluster holds it."""
    return f"kokumi-{server_hash(server)}"


def cluster_name(cluster: ClusterRef, server: str) -> str:
    """The name Argo CD shows for the cluster: who registered it, and which server it is."""
    return f"kokumi-{cluster.namespace}-{cluster.name}-{server_hash(server)}"


def cluster_config(connection: Connection) -> dict[str, Any]:
    """Argo CD's ``ClusterConfig`` for the connection, with the empty fields left out.

    Only bearer token and client certificate are ever written: Kokumi refuses exec plugins, auth
    providers and basic authentication in the kubeconfig, and Argo CD would prefer an
    ``execProviderConfig`` or ``awsAuthConfig`` over the token if one were present. No ``project``
    either: several Environments with different projects may select one Cluster.
    """
    tls: dict[str, Any] = {}
    if connection.certificate_authority:
        tls["caData"] = b64(connection.certificate_authority)
    if connection.client_certificate:
        tls["certData"] = b64(connection.client_certificate)
    if connection.client_key:
        tls["keyData"] = b64(connection.client_key)
    if connection.tls_server_name:
        tls["serverName"] = connection.tls_server_name
    if connection.insecure_skip_tls_verify:
        tls["insecure"] = True
    config: dict[str, Any] = {}
    if connection.token:
        config["bearerToken"] = connection.token
    if tls:
        config["tlsClientConfig"] = tls
    if connection.proxy_url:
        config["proxyUrl"] = connection.proxy_url
    return config


def cluster_secret(
    connection: Connection,
    cluster: ClusterRef,
    namespace: str = ARGOCD_NAMESPACE,
    extras: Extras = NO_EXTRAS,
) -> dict[str, Any]:
    """The complete Secret registering ``cluster`` under its connection's server.

    ``extras`` adds what the holder carries: its carried labels and one label per Environment
    that selects it, its carried annotations (each kind's keys recorded in an annotation of
    Kokumi's, so a later write knows which to remove), and ``spec.scope`` as Argo CD's
    ``namespaces`` and ``clusterResources``. Without extras the Secret is the one Kokumi always
    wrote, so a fleet that carries nothing writes nothing new.

    ``data`` rather than ``stringData``, because the API server only ever returns ``data``: the
    registry can then compare what it would write with what it reads, field for field.

    Refuses the in-cluster server with ``ValueError``: such a Secret would replace the connection
    Argo CD uses for its own cluster, for every Application. The ownership table never asks for
    one; this is the last line of defence should a caller get that wrong.

    Who waits for the server is no part of the registration: the handover records it
    (:func:`kokumi.core.registry.handover.with_waiting`).
    """
    server = normalise_server(connection.server)
    if is_argocd_own(server):
        raise ValueError(
            f"refusing a cluster Secret for Argo CD's own cluster ({server}): use InCluster"
        )
    config = json.dumps(
        cluster_config(connection), sort_keys=True, separators=(",", ":"), ensure_ascii=True
    )
    labels = {
        LABEL_SECRET_TYPE: _SECRET_TYPE_CLUSTER,
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_CLUSTER: cluster.name,
        LABEL_CLUSTER_NAMESPACE: cluster.namespace,
    }
    # Never over Kokumi's four: the allow-list refuses reserved keys, this makes sure.
    labels |= {k: v for k, v in sorted(extras.secret_labels().items()) if k not in labels}
    metadata: dict[str, Any] = {"name": secret_name(server), "namespace": namespace}
    metadata["labels"] = labels
    annotations = dict(extras.annotations)
    if extras.labels:
        annotations[ANNOTATION_CARRIED_LABELS] = ",".join(k for k, _ in extras.labels)
    if extras.annotations:
        annotations[ANNOTATION_CARRIED_ANNOTATIONS] = ",".join(k for k, _ in extras.annotations)
    if annotations:
        metadata["annotations"] = dict(sorted(annotations.items()))
    data = {
        "config": b64(config.encode()),
        "name": b64(cluster_name(cluster, server).encode()),
        "server": b64(server.encode()),
    }
    if extras.namespaces:
        data["namespaces"] = b64(",".join(extras.namespaces).encode())
        if extras.cluster_resources:
            data["clusterResources"] = b64(b"true")
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": "Opaque",
        "data": dict(sorted(data.items())),
    }


def _labels(secret: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = secret.get("metadata")
    if not isinstance(metadata, Mapping):
        return {}
    labels = metadata.get("labels")
    return labels if isinstance(labels, Mapping) else {}


def _annotations(secret: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = secret.get("metadata")
    if not isinstance(metadata, Mapping):
        return {}
    annotations = metadata.get("annotations")
    return annotations if isinstance(annotations, Mapping) else {}


def _recorded(secret: Mapping[str, Any], record: str) -> set[str]:
    value = _annotations(secret).get(record)
    if not isinstance(value, str):
        return set()
    return {key for key in (k.strip() for k in value.split(",")) if key}


def carried_label_keys(secret: Mapping[str, Any]) -> set[str]:
    """The labels of the Secret that are Kokumi's extras: those its record names, and every
    Environment label. Any other label beside Kokumi's four is somebody else's, and stays."""
    keys = _recorded(secret, ANNOTATION_CARRIED_LABELS)
    keys |= {k for k in _labels(secret) if k.startswith(ENVIRONMENT_LABEL_PREFIX)}
    return keys


def carried_annotation_keys(secret: Mapping[str, Any]) -> set[str]:
    """The annotations of the Secret that are Kokumi's extras, with the two records."""
    keys = _recorded(secret, ANNOTATION_CARRIED_ANNOTATIONS)
    return keys | {ANNOTATION_CARRIED_LABELS, ANNOTATION_CARRIED_ANNOTATIONS}


def updated(existing: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    """``desired`` as an in-place update of ``existing``: the metadata the API server keeps
    (uid, resourceVersion...), the labels somebody else put there, and ``desired``'s own.

    The extras ``existing`` carried and ``desired`` does not go: a label removed from the
    Cluster, an Environment that stopped selecting it, the previous holder's at a handover.
    The annotations are ``desired``'s alone, as they always were.
    """
    old = dict(existing.get("metadata") or {})
    new = desired.get("metadata") or {}
    dropped = carried_label_keys(existing)
    labels = {k: v for k, v in (old.get("labels") or {}).items() if k not in dropped}
    old["labels"] = labels | dict(new.get("labels") or {})
    annotations = dict(new.get("annotations") or {})
    if annotations:
        old["annotations"] = annotations
    else:
        old.pop("annotations", None)
    old.pop("managedFields", None)
    return {**desired, "metadata": old}


def is_ours(secret: Mapping[str, Any]) -> bool:
    """Whether Kokumi wrote this cluster Secret and may therefore change or delete it.

    The same test the admission policy applies in Argo CD's namespace, so that Kokumi never
    attempts a write the API server would refuse.
    """
    labels = _labels(secret)
    return (
        labels.get(LABEL_MANAGED_BY) == MANAGED_BY
        and labels.get(LABEL_SECRET_TYPE) == _SECRET_TYPE_CLUSTER
    )


def holder_of(secret: Mapping[str, Any]) -> ClusterRef | None:
    """The Cluster a Secret of Kokumi's registers, as its labels say; None for anybody else's.

    A Secret of Kokumi's without both Cluster labels holds nothing: the registry may delete it.
    """
    if not is_ours(secret):
        return None
    labels = _labels(secret)
    name = labels.get(LABEL_CLUSTER)
    namespace = labels.get(LABEL_CLUSTER_NAMESPACE)
    if not isinstance(name, str) or not isinstance(namespace, str) or not name or not namespace:
        return None
    return ClusterRef(namespace=namespace, name=name)


def server_of(secret: Mapping[str, Any]) -> str | None:
    """The server a cluster Secret registers, as Argo CD reads it; None when it names none.

    Any Secret in Argo CD's namespace may land here, hand-written ones included, so garbage is
    expected and answered with None rather than an exception.
    """
    raw = secret_data(secret, "server")
    if raw is None:
        return None
    try:
        server = normalise_server(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return None
    return server or None


# Reading ``config`` back as Argo CD does: Go's encoding/json into ``ClusterConfig``.

_TLS_FIELDS: dict[str, type] = {
    "insecure": bool,
    "serverName": str,
    "certData": bytes,
    "keyData": bytes,
    "caData": bytes,
}
_CONFIG_FIELDS: dict[str, type] = {
    "username": str,
    "password": str,
    "bearerToken": str,
    "tlsClientConfig": dict,
    "awsAuthConfig": object,
    "execProviderConfig": object,
    "disableCompression": bool,
    "proxyUrl": str,
}


def _go_field(key: str, fields: Mapping[str, type]) -> str | None:
    """Go's decoder prefers an exact key and falls back to one equal under ``bytes.EqualFold``.

    That is Unicode's simple case folding, not Python's ``lower``: ``aw\u017fAuthConfig`` (the
    long s) and ``bearerTo\u212aen`` (the Kelvin sign) are AWS auth and a bearer token to
    Argo CD, and must be to the import too, or it would convert a token Argo CD never uses.
    """
    if key in fields:
        return key
    for name in fields:
        if _equal_fold(key, name):
            return name
    return None


# The non-ASCII runes whose simple case folding orbit holds an ASCII letter (Go's unicode tables):
# the long s with s and S, the Kelvin sign with k and K. Every other orbit of an ASCII letter is
# just its two cases.
_FOLDS_TO_ASCII: Final = {"\u017f": "s", "\u212a": "k"}


def _equal_fold(key: str, name: str) -> bool:
    """``bytes.EqualFold(key, name)`` for an ASCII ``name``, as Go's encoding/json matches."""
    if len(key) != len(name):
        return False
    for got, want in zip(key, name, strict=True):
        if got == want:
            continue
        folded = _FOLDS_TO_ASCII.get(got, got)
        if not (folded.isascii() and want.isascii() and folded.lower() == want.lower()):
            return False
        if not want.isalpha():
            return False
    return True


def _go_decode(value: Any, kind: type, where: str) -> Any:
    if value is None:
        return None
    if kind is object:
        return value
    if kind is bytes:
        if not isinstance(value, str):
            raise ValueError(f"{where} must be a base64 string")
        # Go's base64.StdEncoding skips line breaks and demands padding.
        cleaned = value.replace("\r", "").replace("\n", "")
        try:
            return base64.b64decode(cleaned, validate=True)
        except (binascii.Error, ValueError) as error:
            raise ValueError(f"{where} is not standard base64") from error
    if kind is bool and not isinstance(value, bool):
        raise ValueError(f"{where} must be a boolean")
    if kind is str and not isinstance(value, str):
        raise ValueError(f"{where} must be a string")
    if kind is dict and not isinstance(value, dict):
        raise ValueError(f"{where} must be an object")
    return value


def _go_struct(obj: Mapping[str, Any], fields: Mapping[str, type], where: str) -> dict[str, Any]:
    zero: dict[type, Any] = {bool: False, str: "", bytes: b"", dict: {}, object: None}
    out: dict[str, Any] = {name: zero[kind] for name, kind in fields.items()}
    for key, value in obj.items():
        name = _go_field(key, fields)
        if name is None:
            continue
        decoded = _go_decode(value, fields[name], f"{where}.{name}")
        if decoded is not None:
            out[name] = decoded
    return out


def config_from_secret(secret: Mapping[str, Any]) -> dict[str, Any]:
    """The ``ClusterConfig`` Argo CD decodes from the Secret, with Go's zero values filled in.

    Proves that what Kokumi writes is what Argo CD reads: ``caData``, ``certData`` and ``keyData``
    come back as the PEM bytes. Raises ``ValueError`` where Argo CD would drop the cluster.
    """
    raw = secret_data(secret, "config")
    if raw is None:
        data = secret.get("data")
        present = isinstance(data, Mapping) and data.get("config") is not None
        if present:
            raise ValueError("data.config is not base64")
        raw = b""
    if not raw:
        parsed: Any = {}
    else:
        try:
            parsed = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError("data.config is not JSON") from error
    if parsed is None:
        parsed = {}
    if not isinstance(parsed, dict):
        raise ValueError("data.config must be a JSON object")
    config = _go_struct(parsed, _CONFIG_FIELDS, "config")
    config["tlsClientConfig"] = _go_struct(
        config["tlsClientConfig"], _TLS_FIELDS, "config.tlsClientConfig"
    )
    return config
