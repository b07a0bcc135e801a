"""The Argo CD cluster Secret: its name, its labels, and a config Argo CD reads back unchanged."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.registry import argocd
from kokumi.core.registry.argocd import (
    IN_CLUSTER_SERVER,
    cluster_config,
    cluster_secret,
    config_from_secret,
    holder_of,
    is_ours,
    normalise_server,
    secret_name,
    server_of,
)
from kokumi.core.registry.ownership import ClusterRef
from tests.support import strategies as s

SPOKE = ClusterRef("platform", "spoke")
CA = b"-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ==\n-----END CERTIFICATE-----\n"
# A client certificate and key made at run time: the repository holds no key material.
CERT, KEY = s.client_pair()

ALLOWED_CONFIG_KEYS = {"bearerToken", "tlsClientConfig", "proxyUrl"}
ALLOWED_TLS_KEYS = {"caData", "certData", "keyData", "serverName", "insecure"}
FORBIDDEN_CONFIG_KEYS = {"project", "execProviderConfig", "awsAuthConfig", "username", "password"}


def _expected_hash(server: str) -> str:
    return hashlib.sha256(server.rstrip("/").encode("utf-8")).hexdigest()[:16]


def _decoded(secret: dict[str, Any], key: str) -> bytes:
    return base64.b64decode(secret["data"][key], validate=True)


def _raw_config(secret: dict[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = json.loads(_decoded(secret, "config"))
    return config


# The name, after the server.


def test_secret_name_of_a_known_server() -> None:
    # Precomputed with `printf %s https://spoke.example:6443 | sha256sum`.
    assert secret_name("https://spoke.example:6443") == "kokumi-f6c047b0a2cdd4a3"


@pytest.mark.parametrize(
    "server",
    [
        "https://spoke.example:6443",
        "https://10.0.0.7",
        "https://rancher.example/k8s/clusters/c-m-4xk2",
        IN_CLUSTER_SERVER,
    ],
)
def test_secret_name_is_the_start_of_the_sha256(server: str) -> None:
    assert secret_name(server) == f"kokumi-{_expected_hash(server)}"
    assert len(secret_name(server)) == len("kokumi-") + 16


@pytest.mark.parametrize("slashes", ["/", "//", "///"])
def test_a_trailing_slash_names_the_same_secret(slashes: str) -> None:
    server = "https://spoke.example:6443"
    assert normalise_server(server + slashes) == server
    assert secret_name(server + slashes) == secret_name(server)
    spelled = cluster_secret(Connection(server=server + slashes, token="t"), SPOKE)
    plain = cluster_secret(Connection(server=server, token="t"), SPOKE)
    assert spelled == plain


@given(server=s.servers())
def test_the_name_is_a_valid_secret_name(server: str) -> None:
    name = secret_name(server)
    assert name == f"kokumi-{_expected_hash(server)}"
    assert all(char in "0123456789abcdef" for char in name.removeprefix("kokumi-"))


# The Secret as a whole.


def test_the_secret_for_a_token_and_a_ca() -> None:
    connection = Connection(
        server="https://spoke.example:6443/", token="s3cr3t", certificate_authority=CA
    )
    secret = cluster_secret(connection, SPOKE)
    digest = _expected_hash("https://spoke.example:6443")
    assert secret["apiVersion"] == "v1"
    assert secret["kind"] == "Secret"
    assert secret["type"] == "Opaque"
    assert "stringData" not in secret
    assert secret["metadata"] == {
        "name": f"kokumi-{digest}",
        "namespace": "argocd",
        "labels": {
            "argocd.argoproj.io/secret-type": "cluster",
            "app.kubernetes.io/managed-by": "kokumi",
            "delivery.kokumi.dev/cluster": "spoke",
            "delivery.kokumi.dev/cluster-namespace": "platform",
        },
    }
    assert set(secret["data"]) == {"config", "name", "server"}
    assert _decoded(secret, "server") == b"https://spoke.example:6443"
    assert _decoded(secret, "name") == f"kokumi-platform-spoke-{digest}".encode()
    assert _raw_config(secret) == {
        "bearerToken": "s3cr3t",
        "tlsClientConfig": {"caData": base64.b64encode(CA).decode()},
    }


def test_the_namespace_of_argo_cd_can_be_another() -> None:
    secret = cluster_secret(Connection(server="https://x.example", token="t"), SPOKE, "gitops")
    assert secret["metadata"]["namespace"] == "gitops"
    assert secret["metadata"]["labels"]["delivery.kokumi.dev/cluster-namespace"] == "platform"


def test_a_client_certificate_with_every_tls_setting() -> None:
    connection = Connection(
        server="https://spoke.example:6443",
        client_certificate=CERT,
        client_key=KEY,
        certificate_authority=CA,
        tls_server_name="spoke.internal",
        insecure_skip_tls_verify=True,
        proxy_url="socks5://127.0.0.1:1080",
    )
    assert cluster_config(connection) == {
        "tlsClientConfig": {
            "caData": base64.b64encode(CA).decode(),
            "certData": base64.b64encode(CERT).decode(),
            "keyData": base64.b64encode(KEY).decode(),
            "serverName": "spoke.internal",
            "insecure": True,
        },
        "proxyUrl": "socks5://127.0.0.1:1080",
    }


def test_empty_fields_are_left_out() -> None:
    connection = Connection(server="https://spoke.example", token="abc", client_certificate=b"")
    assert cluster_config(connection) == {"bearerToken": "abc"}
    assert cluster_config(Connection(server="https://spoke.example")) == {}


def test_the_config_is_compact_json_with_sorted_keys() -> None:
    connection = Connection(
        server="https://spoke.example", token="abc", tls_server_name="s", proxy_url="http://p"
    )
    text = _decoded(cluster_secret(connection, SPOKE), "config")
    assert text == (
        b'{"bearerToken":"abc","proxyUrl":"http://p","tlsClientConfig":{"serverName":"s"}}'
    )


def test_the_in_cluster_server_is_refused() -> None:
    for server in (IN_CLUSTER_SERVER, IN_CLUSTER_SERVER + "/"):
        with pytest.raises(ValueError, match="InCluster"):
            cluster_secret(Connection(server=server, token="t"), SPOKE)


@given(connection=s.connections(), cluster=s.cluster_refs())
def test_argo_cd_reads_back_what_the_kubeconfig_said(
    connection: Connection, cluster: ClusterRef
) -> None:
    secret = cluster_secret(connection, cluster)
    config = config_from_secret(secret)
    tls = config["tlsClientConfig"]
    assert config["bearerToken"] == (connection.token or "")
    assert tls["caData"] == (connection.certificate_authority or b"")
    assert tls["certData"] == (connection.client_certificate or b"")
    assert tls["keyData"] == (connection.client_key or b"")
    assert tls["serverName"] == (connection.tls_server_name or "")
    assert tls["insecure"] is connection.insecure_skip_tls_verify
    assert config["proxyUrl"] == (connection.proxy_url or "")
    assert config["username"] == config["password"] == ""
    assert config["execProviderConfig"] is None
    assert config["awsAuthConfig"] is None
    assert server_of(secret) == normalise_server(connection.server)
    assert holder_of(secret) == cluster
    assert is_ours(secret)


@given(connection=s.connections(), cluster=s.cluster_refs())
def test_no_forbidden_key_for_any_connection(connection: Connection, cluster: ClusterRef) -> None:
    secret = cluster_secret(connection, cluster)
    raw = _raw_config(secret)
    assert set(raw) <= ALLOWED_CONFIG_KEYS
    assert not set(raw) & FORBIDDEN_CONFIG_KEYS
    assert set(raw.get("tlsClientConfig", {})) <= ALLOWED_TLS_KEYS
    assert set(secret["data"]) == {"config", "name", "server"}
    for value in raw.values():
        assert value not in ("", {}, False, None)
    for value in raw.get("tlsClientConfig", {}).values():
        assert value not in ("", False, None)


@given(connection=s.connections(), cluster=s.cluster_refs())
def test_equal_input_gives_byte_identical_output(
    connection: Connection, cluster: ClusterRef
) -> None:
    first = cluster_secret(connection, cluster)
    again = cluster_secret(attrs.evolve(connection), ClusterRef(cluster.namespace, cluster.name))
    assert first == again
    assert json.dumps(first, sort_keys=True) == json.dumps(again, sort_keys=True)
    for value in first["data"].values():
        assert base64.b64encode(base64.b64decode(value, validate=True)).decode() == value


@given(connection=s.connections(), cluster=s.cluster_refs(), other=s.cluster_refs())
def test_a_handover_changes_only_labels_and_name(
    connection: Connection, cluster: ClusterRef, other: ClusterRef
) -> None:
    first = cluster_secret(connection, cluster)
    second = cluster_secret(connection, other)
    assert first["metadata"]["name"] == second["metadata"]["name"]
    assert first["data"]["server"] == second["data"]["server"]
    assert first["data"]["config"] == second["data"]["config"]


# Reading Secrets found in Argo CD's namespace.


def _secret(labels: dict[str, Any] | None, data: Any = None) -> dict[str, Any]:
    return {"metadata": {"name": "x", "labels": labels}, "data": data}


OURS = {
    "argocd.argoproj.io/secret-type": "cluster",
    "app.kubernetes.io/managed-by": "kokumi",
    "delivery.kokumi.dev/cluster": "spoke",
    "delivery.kokumi.dev/cluster-namespace": "platform",
}


def test_holder_of_a_secret_of_kokumi() -> None:
    assert holder_of(_secret(OURS)) == SPOKE
    assert is_ours(_secret(OURS))


@pytest.mark.parametrize(
    "change",
    [
        {"app.kubernetes.io/managed-by": "argocd"},
        {"app.kubernetes.io/managed-by": None},
        {"argocd.argoproj.io/secret-type": "repository"},
        {"argocd.argoproj.io/secret-type": None},
    ],
)
def test_a_secret_written_by_others_is_not_ours(change: dict[str, Any]) -> None:
    labels = {key: value for key, value in {**OURS, **change}.items() if value is not None}
    assert not is_ours(_secret(labels))
    assert holder_of(_secret(labels)) is None


@pytest.mark.parametrize(
    "missing", ["delivery.kokumi.dev/cluster", "delivery.kokumi.dev/cluster-namespace"]
)
def test_a_secret_of_kokumi_without_its_cluster_holds_nothing(missing: str) -> None:
    labels = {key: value for key, value in OURS.items() if key != missing}
    assert is_ours(_secret(labels))
    assert holder_of(_secret(labels)) is None
    assert holder_of(_secret({**OURS, missing: ""})) is None


@pytest.mark.parametrize(
    "secret",
    [
        {},
        {"metadata": None},
        {"metadata": {"labels": ["a"]}},
        {"metadata": {"labels": {"app.kubernetes.io/managed-by": 7}}},
    ],
)
def test_odd_metadata_is_not_ours(secret: dict[str, Any]) -> None:
    assert not is_ours(secret)
    assert holder_of(secret) is None


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {"server": base64.b64encode(b"https://x.example:6443/").decode()},
            "https://x.example:6443",
        ),
        ({"server": base64.b64encode(b"https://x.example").decode()}, "https://x.example"),
        ({"server": "not base64!"}, None),
        ({"server": base64.b64encode(b"\xff\xfe").decode()}, None),
        ({"server": base64.b64encode(b"/").decode()}, None),
        ({"server": ""}, None),
        ({"server": 17}, None),
        ({}, None),
        (None, None),
        (["server"], None),
    ],
)
def test_server_of(data: Any, expected: str | None) -> None:
    assert server_of(_secret(OURS, data)) == expected


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=10,
)


@given(secret=json_values)
def test_reading_garbage_never_raises(secret: Any) -> None:
    if not isinstance(secret, dict):
        secret = {"data": secret, "metadata": secret}
    server = server_of(secret)
    assert server is None or (server != "" and not server.endswith("/"))
    assert isinstance(is_ours(secret), bool)
    holder = holder_of(secret)
    assert holder is None or (is_ours(secret) and isinstance(holder, ClusterRef))


# Decoding config as Argo CD does.


def _with_config(text: bytes) -> dict[str, Any]:
    return _secret(OURS, {"config": base64.b64encode(text).decode()})


def test_argo_cd_zero_values_for_a_config_it_wrote_itself() -> None:
    config = config_from_secret(_with_config(b'{"tlsClientConfig":{"insecure":false}}'))
    assert config["bearerToken"] == ""
    assert config["tlsClientConfig"] == {
        "insecure": False,
        "serverName": "",
        "certData": b"",
        "keyData": b"",
        "caData": b"",
    }


def test_keys_match_case_insensitively_as_in_go() -> None:
    text = b'{"BearerToken":"t","TLSClientConfig":{"CAData":"' + base64.b64encode(CA) + b'"}}'
    config = config_from_secret(_with_config(text))
    assert config["bearerToken"] == "t"
    assert config["tlsClientConfig"]["caData"] == CA


def test_an_empty_or_missing_config_is_all_zero() -> None:
    assert config_from_secret(_secret(OURS, {}))["bearerToken"] == ""
    assert config_from_secret(_with_config(b""))["tlsClientConfig"]["insecure"] is False
    assert config_from_secret(_with_config(b"null"))["proxyUrl"] == ""


@pytest.mark.parametrize(
    "text",
    [
        b"{not json",
        b"[]",
        b'"text"',
        b'{"bearerToken": 5}',
        b'{"tlsClientConfig": {"insecure": "true"}}',
        b'{"tlsClientConfig": {"caData": "no padding"}}',
        b'{"tlsClientConfig": "x"}',
    ],
)
def test_argo_cd_drops_a_cluster_whose_config_it_cannot_decode(text: bytes) -> None:
    with pytest.raises(ValueError, match="config"):
        config_from_secret(_with_config(text))


def test_config_that_is_not_base64_cannot_be_decoded() -> None:
    with pytest.raises(ValueError, match="base64"):
        config_from_secret(_secret(OURS, {"config": "%%%"}))


def test_the_public_names_exist() -> None:
    assert len(set(argocd.__all__)) == len(argocd.__all__)
    assert [name for name in argocd.__all__ if not hasattr(argocd, name)] == []


# --- reading config as Go does: field names under bytes.EqualFold ------------------------------


def _config_secret(config: dict[str, Any]) -> dict[str, Any]:
    return {"data": {"config": base64.b64encode(json.dumps(config).encode()).decode()}}


def test_keys_fold_as_gos_equal_fold_does() -> None:
    """U+017F folds to s and U+212A to k in Go: Argo CD reads these as AWS auth and a token."""
    config = argocd.config_from_secret(
        _config_secret({"bearerTo\u212aen": "t", "aw\u017fAuthConfig": {"clusterName": "c"}})
    )
    assert config["bearerToken"] == "t"
    assert config["awsAuthConfig"] == {"clusterName": "c"}
    tls = argocd.config_from_secret(_config_secret({"tlsClientConfig": {"In\u017fecure": True}}))
    assert tls["tlsClientConfig"]["insecure"] is True
    # Python's lower folds these, Go's EqualFold does not: nothing to Argo CD, nothing here.
    for key in ("BEARERTOKEN\u0130", "bearerToken\u0307", "proxyUrl\u00df"):
        assert argocd._go_field(key, {"bearerToken": str, "proxyUrl": str}) is None
    assert argocd._go_field("\u0130nsecure", {"insecure": bool}) is None  # İ is not i in Go


_ORBITS = [set("sS\u017f"), set("kK\u212a")]
_NAMES = ("bearerToken", "awsAuthConfig", "insecure", "tlsClientConfig")


def _spellings(name: str) -> st.SearchStrategy[str]:
    """``name`` with each letter in any of its folding orbit's runes, or another rune."""

    def choices(c: str) -> list[str]:
        orbit = next((o for o in _ORBITS if c in o), {c, c.upper(), c.lower()})
        return sorted(orbit | {"x", "\u0131", "\u0130"})

    return st.tuples(*[st.sampled_from(choices(c)) for c in name]).map("".join)


@given(st.sampled_from(_NAMES).flatmap(_spellings))
def test_equal_fold_agrees_with_simple_case_folding(key: str) -> None:
    """Against Go's rule written out: each rune equal, or in one simple-folding orbit."""

    def same(a: str, b: str) -> bool:
        if a == b or (a.isascii() and b.isascii() and a.isalpha() and a.lower() == b.lower()):
            return True
        return any(a in orbit and b in orbit for orbit in _ORBITS)

    for name in _NAMES:
        pairs = zip(key, name, strict=False)
        expected = len(key) == len(name) and all(same(a, b) for a, b in pairs)
        assert argocd._equal_fold(key, name) == expected
