"""kokumi.kube without a server: error mapping, paths, kubeconfig parsing, token files, backoff."""

from __future__ import annotations

import base64
import datetime
import importlib
import json
import logging
import os
import ssl
import sys
import tempfile
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

import kokumi.kube
import kokumi.objects
from kokumi.kube import (
    CONFIG_MAPS,
    CUSTOM_RESOURCE_DEFINITIONS,
    NAMESPACES,
    AlreadyExists,
    ApiError,
    BadRequest,
    Client,
    Config,
    ConfigError,
    Conflict,
    FileToken,
    Forbidden,
    Gone,
    Invalid,
    KubeError,
    NotFound,
    Resource,
    ServerError,
    ServerTimeout,
    ServiceUnavailable,
    StaticToken,
    TooManyRequests,
    Unauthorized,
    resource_path,
    wire,
)
from kokumi.kube.backoff import Backoff, FailureLog
from kokumi.kube.errors import error_from_status

# ``kokumi.kube.watch`` the attribute is the function; the module is reached by its name.
client_module = importlib.import_module("kokumi.kube.client")
config_module = importlib.import_module("kokumi.kube.config")
identity_module = importlib.import_module("kokumi.kube.identity")
observer_module = importlib.import_module("kokumi.kube.observer")
resources_module = importlib.import_module("kokumi.kube.resources")
errors_module = importlib.import_module("kokumi.kube.errors")
watch_module = importlib.import_module("kokumi.kube.watch")

# --- the public surface -------------------------------------------------------------------


def test_all_is_explicit_complete_and_resolvable() -> None:
    names = kokumi.kube.__all__
    assert len(names) == len(set(names)), "duplicates in __all__"
    for name in names:
        assert hasattr(kokumi.kube, name), name
        assert not name.startswith("_")
    exported = set(names)
    for module in (
        client_module,
        config_module,
        identity_module,
        observer_module,
        resources_module,
        watch_module,
    ):
        missing = set(module.__all__) - exported
        assert not missing, f"{module.__name__} exports {missing} but kokumi.kube does not"
    # Errors: every class of the hierarchy is reachable from the package.
    for name in errors_module.__all__:
        value = getattr(errors_module, name)
        if isinstance(value, type):
            assert name in exported, name
    # Nothing public is defined in the package that __all__ forgets.
    public = {
        n
        for n, v in vars(kokumi.kube).items()
        if not n.startswith("_") and not isinstance(v, type(kokumi))
    }
    assert public == exported


def test_watch_contract_types() -> None:
    event = kokumi.kube.WatchEvent("ADDED", {"metadata": {"name": "a"}})
    resync = kokumi.kube.Resync(({"metadata": {"name": "a"}},))
    assert event.type == "ADDED"
    assert resync.objects[0]["metadata"]["name"] == "a"
    with pytest.raises(AttributeError):
        event.type = "DELETED"  # type: ignore[misc]


# --- errors -------------------------------------------------------------------------------


def status(code: int, reason: str, message: str = "m", **details: object) -> dict[str, object]:
    body: dict[str, object] = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }
    if details:
        body["details"] = details
    return body


@pytest.mark.parametrize(
    ("code", "reason", "cls"),
    [
        (400, "BadRequest", BadRequest),
        (401, "Unauthorized", Unauthorized),
        (403, "Forbidden", Forbidden),
        (404, "NotFound", NotFound),
        (409, "AlreadyExists", AlreadyExists),
        (409, "Conflict", Conflict),
        (410, "Expired", Gone),
        (410, "Gone", Gone),
        (422, "Invalid", Invalid),
        (429, "TooManyRequests", TooManyRequests),
        (500, "InternalError", ServerError),
        (500, "ServerTimeout", ServerTimeout),
        (503, "ServiceUnavailable", ServiceUnavailable),
        (504, "Timeout", ServerTimeout),
        (418, "Teapot", ApiError),
    ],
)
def test_status_maps_to_its_class(code: int, reason: str, cls: type[ApiError]) -> None:
    error = error_from_status(code, status(code, reason), context="GET /x")
    assert type(error) is cls
    assert isinstance(error, KubeError)
    assert (error.code, error.reason) == (code, reason)
    assert str(error) == f"{code} {reason}: GET /x: m"


def test_already_exists_is_not_a_conflict() -> None:
    """A create that lost the name must not be mistaken for a stale write worth retrying."""
    error = error_from_status(409, status(409, "AlreadyExists"))
    assert not isinstance(error, Conflict)


def test_without_a_status_the_http_code_decides() -> None:
    assert type(error_from_status(404, None)) is NotFound
    assert type(error_from_status(502, None)) is ServerError
    error = error_from_status(503, {"kind": "ConfigMap", "message": "not a Status"})
    assert type(error) is ServiceUnavailable
    assert error.message == "the server gave no Status"


def test_invalid_keeps_the_causes() -> None:
    causes = [{"reason": "FieldValueInvalid", "message": "bad", "field": "metadata.name"}]
    error = error_from_status(422, status(422, "Invalid", causes=causes, name="x", kind="Secret"))
    assert isinstance(error, Invalid)
    assert error.causes == causes
    assert error.details["kind"] == "Secret"


def test_retry_after_comes_from_header_or_details() -> None:
    error = error_from_status(500, status(500, "ServerTimeout", retryAfterSeconds=2))
    assert error.retry_after == 2.0
    error = error_from_status(429, status(429, "TooManyRequests"), retry_after=5.0)
    assert error.retry_after == 5.0
    assert wire.retry_after("3") == 3.0
    assert wire.retry_after("Wed, 21 Oct 2015 07:28:00 GMT") is None
    assert wire.retry_after("-1") is None


def test_which_errors_are_retried() -> None:
    assert wire.retryable(error_from_status(429, None))
    assert wire.retryable(error_from_status(504, None))
    assert not wire.retryable(error_from_status(500, None))
    assert wire.retryable(error_from_status(500, None, retry_after=1))
    assert not wire.retryable(error_from_status(409, None, retry_after=1))


def test_error_text_never_holds_a_body_it_was_not_given() -> None:
    """Only the fields of a Status are read: an echoed object cannot leak into the text."""
    leaked = {"kind": "Secret", "data": {"token": "c2VjcmV0LXZhbHVl"}, "message": "hi"}
    error = error_from_status(400, leaked, context="POST /api/v1/namespaces/n/secrets")
    for text in (str(error), repr(error), *map(str, error.args)):
        assert "c2VjcmV0LXZhbHVl" not in text
        assert "hi" not in text


# --- resources ----------------------------------------------------------------------------


def test_resource_paths() -> None:
    assert resource_path(CONFIG_MAPS) == "/api/v1/configmaps"
    assert resource_path(CONFIG_MAPS, namespace="n") == "/api/v1/namespaces/n/configmaps"
    assert (
        resource_path(CONFIG_MAPS, namespace="n", name="a") == "/api/v1/namespaces/n/configmaps/a"
    )
    assert resource_path(NAMESPACES, name="n") == "/api/v1/namespaces/n"
    gizmos = Resource("example.dev", "v1", "gizmos", "Gizmo")
    assert gizmos.api_version == "example.dev/v1"
    assert (
        resource_path(gizmos, namespace="n", name="g", subresource="status")
        == "/apis/example.dev/v1/namespaces/n/gizmos/g/status"
    )
    assert resource_path(CUSTOM_RESOURCE_DEFINITIONS, name="a.b") == (
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/a.b"
    )
    # A name is one segment: nothing in it can climb the path.
    assert (
        resource_path(CONFIG_MAPS, namespace="n", name="../x")
        == "/api/v1/namespaces/n/configmaps/..%2Fx"
    )
    # Dot-segments would be resolved on the way and name another resource; an empty name, the
    # collection (a DELETE of it is a deletecollection). None is a name any object can have.
    for bad in (".", "..", ""):
        with pytest.raises(kokumi.kube.InvalidName, match="not a name any Kubernetes object"):
            resource_path(CONFIG_MAPS, namespace="n", name=bad)
        with pytest.raises(kokumi.kube.InvalidName):
            resource_path(CONFIG_MAPS, namespace=bad or ".", name="a")
        with pytest.raises(kokumi.kube.InvalidName):
            resource_path(CONFIG_MAPS, namespace="n", name="a", subresource=bad or "..")
    with pytest.raises(ValueError, match="namespaced"):
        resource_path(CONFIG_MAPS, name="a")
    with pytest.raises(ValueError, match="cluster-scoped"):
        resource_path(NAMESPACES, namespace="n")
    with pytest.raises(ValueError, match="subresource"):
        resource_path(CONFIG_MAPS, namespace="n", subresource="status")


# --- kubeconfig ---------------------------------------------------------------------------


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def write_kubeconfig(path: Path, document: dict[str, object]) -> Path:
    path.write_text(json.dumps(document))
    return path


def test_kubeconfig_contexts_files_and_data(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_bytes(b"CA-FROM-FILE")
    (tmp_path / "token").write_text("file-token\n")
    config_path = write_kubeconfig(
        tmp_path / "config",
        {
            "current-context": "one",
            "clusters": [
                {
                    "name": "c1",
                    "cluster": {
                        "server": "https://one.example:6443/",
                        "certificate-authority": "ca.pem",
                        "tls-server-name": "api.one",
                        "proxy-url": "http://proxy.example:3128",
                    },
                },
                {
                    "name": "c2",
                    "cluster": {"server": "https://two.example", "insecure-skip-tls-verify": True},
                },
            ],
            "users": [
                {
                    "name": "u1",
                    "user": {"client-certificate-data": b64(b"CERT"), "client-key-data": b64(b"K")},
                },
                {"name": "u2", "user": {"tokenFile": "token"}},
            ],
            "contexts": [
                {"name": "one", "context": {"cluster": "c1", "user": "u1", "namespace": "ns1"}},
                {"name": "two", "context": {"cluster": "c2", "user": "u2"}},
            ],
        },
    )
    one = Config.from_kubeconfig(config_path)
    assert one.server == "https://one.example:6443"
    assert one.certificate_authority == b"CA-FROM-FILE"
    assert (one.client_certificate, one.client_key) == (b"CERT", b"K")
    assert one.tls_server_name == "api.one"
    assert one.proxy_url == "http://proxy.example:3128"
    assert one.namespace == "ns1"
    assert one.token is None
    assert "CERT" not in repr(one)

    two = Config.from_kubeconfig(config_path, context="two")
    assert two.insecure_skip_tls_verify
    assert two.namespace == "default"
    assert isinstance(two.token, FileToken)
    assert two.token.path == tmp_path / "token"


def test_kubeconfig_env_merges_first_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = write_kubeconfig(
        tmp_path / "a",
        {
            "current-context": "ctx",
            "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
            "users": [{"name": "u", "user": {"token": "first"}}],
        },
    )
    second = write_kubeconfig(
        tmp_path / "b",
        {
            "current-context": "other",
            "clusters": [{"name": "c", "cluster": {"server": "https://c.example"}}],
            "users": [{"name": "u", "user": {"token": "second"}}],
        },
    )
    monkeypatch.setenv(
        "KUBECONFIG", os.pathsep.join([str(first), str(tmp_path / "none"), str(second)])
    )
    config = Config.from_kubeconfig()
    assert config.server == "https://c.example"
    assert config.token == StaticToken("first")
    assert "first" not in repr(config.token)


@pytest.mark.parametrize(
    ("user", "context", "message"),
    [
        ({"exec": {"command": "x"}}, None, "exec credential plugins"),
        ({"auth-provider": {"name": "oidc"}}, None, "auth providers"),
        ({"token": "t"}, "missing", "no context 'missing'"),
        ({"client-certificate-data": "%%%"}, None, "not valid base64"),
    ],
)
def test_kubeconfig_refusals(
    tmp_path: Path, user: dict[str, object], context: str | None, message: str
) -> None:
    path = write_kubeconfig(
        tmp_path / "config",
        {
            "current-context": "ctx",
            "clusters": [{"name": "c", "cluster": {"server": "https://c.example"}}],
            "users": [{"name": "u", "user": user}],
            "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        },
    )
    with pytest.raises(ConfigError, match=message):
        Config.from_kubeconfig(path, context=context)


def test_in_cluster_needs_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError, match="KUBERNETES_SERVICE_HOST"):
        Config.in_cluster(tmp_path)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(ConfigError, match="no service-account token"):
        Config.in_cluster(tmp_path)
    (tmp_path / "token").write_text("t")
    (tmp_path / "ca.crt").write_bytes(b"CA")
    config = Config.in_cluster(tmp_path)
    assert config.server == "https://[fd00::1]:443"
    assert config.namespace == "default"
    assert Config.load(root=tmp_path).server == config.server


def test_client_key_file_lives_only_for_the_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The PEM key stays in memory, or touches the disk only in a private directory, briefly."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "me")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    seen: list[tuple[str, int, int]] = []
    real = ssl.SSLContext.load_cert_chain

    def spy(self: ssl.SSLContext, certfile: str, *args: object, **kwargs: object) -> None:
        seen.append(
            (
                certfile,
                os.stat(certfile).st_mode & 0o777,
                os.stat(os.path.dirname(certfile)).st_mode & 0o777,
            )
        )
        real(self, certfile)

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", spy)
    # On Linux the key stays in memory: a path under /proc/self/fd, nothing in any directory.
    Config(
        "https://x", client_certificate=cert_pem, client_key=key_pem, certificate_authority=cert_pem
    ).ssl_context()
    assert len(seen) == 1
    assert seen[0][0].startswith("/proc/self/fd/")
    assert not os.path.exists(seen[0][0])  # the descriptor is closed again
    assert list(tmp_path.iterdir()) == []
    # Without memfd_create, a private file in a private directory, gone afterwards.
    monkeypatch.delattr(os, "memfd_create")
    Config(
        "https://x", client_certificate=cert_pem, client_key=key_pem, certificate_authority=cert_pem
    ).ssl_context()
    assert len(seen) == 2
    path, file_mode, dir_mode = seen[1]
    assert (file_mode, dir_mode) == (0o600, 0o700)
    assert not os.path.exists(path)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ConfigError, match="needs its key"):
        Config("https://x", client_certificate=cert_pem).ssl_context()


# --- tokens and backoff -------------------------------------------------------------------


async def test_file_token_rereads_after_max_age_and_on_refresh(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / "token"
    path.write_text("one\n")
    token = FileToken(path, max_age=60, clock=trio.current_time)
    assert await token.token() == "one"
    path.write_text("two")
    await trio.sleep(30)
    assert await token.token() == "one"  # cached: a minute has not passed
    await trio.sleep(31)
    assert await token.token() == "two"
    path.write_text("three")
    assert await token.refresh() == "three"  # a 401 re-reads at once
    assert await token.refresh() is None  # unchanged: retrying would be pointless
    path.unlink()
    await trio.sleep(61)
    assert await token.token() == "three"  # a failed re-read keeps the last good token
    with pytest.raises(ConfigError, match="cannot read"):
        await FileToken(path).token()


def test_file_token_age_is_kept_across_trio_runs(tmp_path: Path) -> None:
    """Each Trio run's clock has its own origin; the token's age must not depend on it."""
    path = tmp_path / "token"
    path.write_text("one")
    token = FileToken(path)
    assert trio.run(token.token) == "one"
    path.write_text("two")
    for _ in range(5):
        assert trio.run(token.token) == "one"


def test_backoff_grows_with_jitter_and_resets() -> None:
    backoff = Backoff(0.5, 4.0)
    assert not backoff.failing
    delays = [backoff.next() for _ in range(6)]
    for delay, ceiling in zip(delays, [0.5, 1, 2, 4, 4, 4], strict=True):
        assert ceiling / 2 <= delay <= ceiling
    assert backoff.failing
    backoff.reset()
    assert not backoff.failing
    assert backoff.next() <= 0.5


def test_failure_log_says_each_change_once(caplog: pytest.LogCaptureFixture) -> None:
    failures = FailureLog(logging.getLogger("kokumi.test"), "Cluster a/b")
    with caplog.at_level(logging.INFO, logger="kokumi.test"):
        for _ in range(50):
            failures.failed("hub down")
        failures.failed("forbidden")
        failures.failed("forbidden")
        failures.recovered()
        failures.recovered()
        failures.failed("hub down")
    assert [r.getMessage() for r in caplog.records] == [
        "Cluster a/b: hub down; retrying",
        "Cluster a/b: forbidden; retrying",
        "Cluster a/b: recovered",
        "Cluster a/b: hub down; retrying",
    ]


def test_store_keys_by_namespace_and_name() -> None:
    store = kokumi.kube.Store()
    a = {"metadata": {"namespace": "n", "name": "a"}}
    node = {"metadata": {"name": "node"}}
    store._replace((a, node))
    assert store.synced
    assert store.get("n", "a") is a
    assert store.get(None, "node") is node
    store._apply(kokumi.kube.WatchEvent("DELETED", a))
    assert store.get("n", "a") is None
    assert list(store) == [(None, "node")]


# --- the form a store keeps objects in ---


def _nested(inner: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    return st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=80), _nested, max_leaves=20
)


@given(
    st.dictionaries(st.text(max_size=12), _json, max_size=5),
    st.dictionaries(st.text(max_size=12), _json, max_size=4),
)
def test_the_kept_form_equals_the_object_without_its_managed_fields(
    fields: dict[str, object], metadata: dict[str, object]
) -> None:
    obj = {**fields, "metadata": {**metadata, "managedFields": [{"manager": "kubectl"}]}}
    decoded = json.loads(json.dumps(obj))
    kept = kokumi.objects.kept_form(decoded)
    del obj["metadata"]["managedFields"]  # type: ignore[attr-defined]
    assert kept == obj
    assert decoded["metadata"]["managedFields"], "the decoded object is left as it was"


def _cluster(name: str) -> dict[str, Any]:
    decoded: dict[str, Any] = json.loads(
        json.dumps(
            {
                "kind": "Cluster",
                "metadata": {"name": name, "namespace": "fleet", "uid": f"uid-{name}"},
                "status": {"conditions": [{"type": "Ready", "reason": "Ready", "message": "m"}]},
            }
        )
    )
    return decoded


def test_objects_decoded_apart_share_their_keys_and_repeated_values() -> None:
    """Kept once: at 10,000 Clusters the decoded copies of each key were 1.5 KB a Cluster."""
    a, b = (kokumi.objects.kept_form(_cluster(name)) for name in ("a", "b"))
    key_a, key_b = (next(k for k in o if k == "metadata") for o in (a, b))
    assert key_a is key_b
    condition_a, condition_b = (o["status"]["conditions"][0] for o in (a, b))
    assert condition_a["reason"] is condition_b["reason"]
    assert a["metadata"]["namespace"] is b["metadata"]["namespace"]
    # What tells one object from another is not shared: it would only fill the table.
    before = len(kokumi.objects._table)
    kokumi.objects.kept_form(_cluster("c"))
    assert len(kokumi.objects._table) == before


def test_the_table_of_shared_strings_is_bounded() -> None:
    """A fleet's churn of label values must not grow it for ever (``sys.intern`` would)."""
    for index in range(kokumi.objects._TABLE_SIZE * 2 + 10):
        kokumi.objects.kept_form({"metadata": {"labels": {"fleet": f"value-{index}"}}})
        assert len(kokumi.objects._table) <= kokumi.objects._TABLE_SIZE
    kept = kokumi.objects.kept_form({"metadata": {"labels": {"fleet": "value-0"}}})
    assert kept == {"metadata": {"labels": {"fleet": "value-0"}}}


def test_an_object_nested_past_the_recursion_limit_is_kept_as_decoded_below_a_depth() -> None:
    """A resource that keeps unknown fields may nest deeper than the interpreter's stack: the
    watch keeping it must not end in a RecursionError."""
    depth = sys.getrecursionlimit() * 2
    spec: dict[str, Any] = {}
    node = spec
    for _ in range(depth):
        node["x"] = {}
        node = node["x"]
    kept = kokumi.objects.kept_form(
        {"metadata": {"name": "deep", "managedFields": []}, "spec": spec}
    )
    assert kept["metadata"] == {"name": "deep"}
    walked, original = kept["spec"], spec
    for level in range(depth):
        if level > kokumi.objects._SHARED_DEPTH:
            assert walked is original, "kept as decoded below the depth"
            break
        walked, original = walked["x"], original["x"]
    else:
        raise AssertionError("never reached the depth")


# --- the old names, kept for embedders ---
def test_the_configs_names_before_the_kubeconfigs_words_still_work() -> None:
    """kokumi.Config is public: client_cert, ca and insecure still build and read it."""
    old = Config("https://x", client_cert=b"C", client_key=b"K", ca=b"A", insecure=True)
    assert old == Config(
        "https://x",
        client_certificate=b"C",
        client_key=b"K",
        certificate_authority=b"A",
        insecure_skip_tls_verify=True,
    )
    assert (old.client_cert, old.ca, old.insecure) == (b"C", b"A", True)
    assert attrs.evolve(old, ca=None).certificate_authority is None
    assert attrs.evolve(old, certificate_authority=b"B").ca == b"B"


# --- end of the old names ---


# --- a fenced client --------------------------------------------------------------------------


async def test_a_client_read_only_in_a_namespace_sends_no_write_there() -> None:
    """Reads go; writes elsewhere go; a write in the namespace, or of the namespace object
    itself, is refused with the reason given, and never sent. Clones keep the rule."""
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        return httpx.Response(200, json={"kind": "ConfigMap", "metadata": {"name": "x"}})

    gizmos = Resource("example.com", "v1", "gizmos", "Gizmo")
    async with Client(
        Config(server="https://hub.example"), transport=httpx.MockTransport(answer)
    ) as client:
        guarded = client.read_only_in("argocd", "namespace argocd is Argo CD's")
        await guarded.get(CONFIG_MAPS, "x", namespace="argocd")
        await guarded.create(CONFIG_MAPS, {"metadata": {"name": "x"}}, namespace="team")
        writes = (
            guarded.create(CONFIG_MAPS, {"metadata": {"name": "x"}}, namespace="argocd"),
            guarded.patch_merge(gizmos, "g", {}, namespace="argocd"),
            guarded.delete(NAMESPACES, "argocd"),
            guarded.delete_collection(CONFIG_MAPS, namespace="argocd"),
            guarded.acting_as(kokumi.kube.Identity(user="bob")).delete(
                CONFIG_MAPS, "x", namespace="argocd"
            ),
        )
        for write in writes:
            with pytest.raises(kokumi.kube.WriteRefused, match="not sent: namespace argocd is"):
                await write
        assert seen == ["GET /api/v1/namespaces/argocd/configmaps/x",
                        "POST /api/v1/namespaces/team/configmaps"]  # fmt: skip
        await client.delete(CONFIG_MAPS, "x", namespace="argocd")  # the client it came from
        assert seen[-1] == "DELETE /api/v1/namespaces/argocd/configmaps/x"


async def test_a_fenced_client_sends_no_write_once_its_fence_says_no() -> None:
    """Reads always go; a write goes only while the fence says yes, judged after the wait for a
    request slot: a write that waited while the fence turned (a Lease lost) is never sent."""
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.method)
        return httpx.Response(200, json={"kind": "ConfigMap", "metadata": {"name": "x"}})

    allowed = True
    config = Config(server="https://hub.example")
    async with Client(config, transport=httpx.MockTransport(answer), max_requests=1) as client:
        fenced = client.fenced(lambda: allowed)
        await fenced.patch_merge(CONFIG_MAPS, "x", {"data": {}}, namespace="ns")
        assert seen == ["PATCH"]
        allowed = False
        assert (await fenced.get(CONFIG_MAPS, "x", namespace="ns"))["kind"] == "ConfigMap"
        with pytest.raises(kokumi.kube.Fenced, match=r"PATCH .*not sent"):
            await fenced.patch_merge(CONFIG_MAPS, "x", {"data": {}}, namespace="ns")
        with pytest.raises(kokumi.kube.Fenced):
            await fenced.delete(CONFIG_MAPS, "x", namespace="ns")
        assert seen == ["PATCH", "GET"]
        # The unfenced client it came from is not fenced.
        await client.delete(CONFIG_MAPS, "x", namespace="ns")
        assert seen[-1] == "DELETE"

        # A write that waits for the only request slot while the fence turns is not sent.
        allowed = True
        outcome: list[str] = []

        async def write() -> None:
            try:
                await fenced.patch_merge(CONFIG_MAPS, "x", {"data": {}}, namespace="ns")
                outcome.append("sent")
            except kokumi.kube.Fenced:
                outcome.append("fenced")

        async with trio.open_nursery() as nursery:
            limiter = client._requests
            await limiter.acquire()
            nursery.start_soon(write)
            await trio.testing.wait_all_tasks_blocked()
            allowed = False
            limiter.release()
        assert outcome == ["fenced"]
        assert seen.count("PATCH") == 1


async def test_a_lane_has_request_slots_of_its_own(autojump_clock: object) -> None:
    """A Lease's renewal must not wait behind the fleet's requests: with every shared slot
    taken, a request of the lane still goes; the shared client's waits until a slot frees."""
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        return httpx.Response(200, json={"kind": "ConfigMap", "metadata": {"name": "x"}})

    config = Config(server="https://hub.example")
    async with Client(config, transport=httpx.MockTransport(answer), max_requests=1) as client:
        lane = client.lane(1)
        fleet = object()  # the fleet's requests, holding the one shared slot
        await client._requests.acquire_on_behalf_of(fleet)
        try:
            assert (await lane.get(CONFIG_MAPS, "lease", namespace="ns"))["kind"] == "ConfigMap"
            with trio.move_on_after(30) as waited:
                await client.get(CONFIG_MAPS, "queued", namespace="ns")
            assert waited.cancelled_caught
        finally:
            client._requests.release_on_behalf_of(fleet)
        await client.get(CONFIG_MAPS, "queued", namespace="ns")
        assert seen == [
            "/api/v1/namespaces/ns/configmaps/lease",
            "/api/v1/namespaces/ns/configmaps/queued",
        ]
