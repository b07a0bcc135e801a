"""kokumi.core.kubeconfig: every refusal with its exact message, the accepted variants, and
properties.

The properties run on arbitrary YAML and JSON and on valid kubeconfigs with random edits: parsing
never raises, and no message quotes a token, a key or a certificate it was given.
"""

from __future__ import annotations

import base64
import json
import os
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kokumi.core.kubeconfig import reader
from kokumi.core.kubeconfig.connection import (
    MAX_SIZE,
    REASON,
    Code,
    Connection,
    KubeconfigRefused,
    Refusal,
)
from kokumi.core.kubeconfig.events import PARSE_BUDGET
from kokumi.core.kubeconfig.reader import examine, minimise, parse
from tests.support import strategies as s
from tests.support.paths import REPO

DOCS = REPO / "docs" / "reasons.md"

Document = dict[str, Any]


def edit(change: Callable[[Document], object], style: str = "yaml") -> str:
    """The spec's kubeconfig (token and CA), changed in place by ``change``."""
    document = s.kubeconfig()
    change(document)
    return s.dump(document, style)


def cluster(document: Document) -> Document:
    body: Document = document["clusters"][0]["cluster"]
    return body


def user(document: Document) -> Document:
    body: Document = document["users"][0]["user"]
    return body


def context(document: Document) -> Document:
    body: Document = document["contexts"][0]["context"]
    return body


def set_cluster(**fields: object) -> Callable[[], str]:
    """Keyword names use _ for -, as the kubeconfig's keys have dashes."""
    return lambda: edit(lambda d: cluster(d).update(_dashed(fields)))


def set_user(**fields: object) -> Callable[[], str]:
    return lambda: edit(lambda d: user(d).update(_dashed(fields)))


def only_user(**fields: object) -> Callable[[], str]:
    return lambda: edit(lambda d: d["users"][0].update(user=_dashed(fields)))


def _dashed(fields: dict[str, object]) -> dict[str, object]:
    return {key.replace("_", "-"): value for key, value in fields.items()}


def _pem_block(label: str, body: bytes) -> bytes:
    """A PEM block around ``body``: malformed on purpose where a test needs a broken one."""
    return b"-----BEGIN %s-----\n%s\n-----END %s-----\n" % (label.encode(), body, label.encode())


def certificate_user(certificate: bytes, key: bytes) -> Callable[[], str]:
    return only_user(client_certificate_data=s.b64(certificate), client_key_data=s.b64(key))


def client_certificate() -> bytes:
    return s.client_pair("ec")[0]


def client_key() -> bytes:
    return s.client_pair("ec")[1]


def text(value: str) -> Callable[[], str]:
    return lambda: value


def with_line(after: str, line: str, style: str = "yaml") -> Callable[[], str]:
    """The spec's kubeconfig as text, ``line`` put after the first line that holds ``after``."""

    def make() -> str:
        lines = s.dump(s.kubeconfig(), style).splitlines(keepends=True)
        at = next(i for i, held in enumerate(lines) if after in held) + 1
        return "".join([*lines[:at], line, *lines[at:]])

    return make


def repeated(key: str | None, line: int, column: int) -> str:
    named = f'the key "{key}"' if key is not None else "a key"
    return (
        f"the kubeconfig has {named} twice in one mapping (line {line}, column {column}), and "
        "readers differ on which value counts: keep one"
    )


C = 'cluster "spoke"'
U = 'user "kokumi"'
X = 'context "spoke"'
INLINE = "use a ServiceAccount token or a client certificate inline"
FLATTEN = "e.g. with kubectl config view --minify --flatten"
NOT_URL = (
    f"{C} has a server that is not an absolute http or https URL (clusters[].cluster.server): "
    "write it as https://host:port"
)
NOT_PROXY = (
    f"{C} has a proxy-url that is not an http, https or socks5 URL (clusters[].cluster.proxy-url): "
    "write it as http://proxy.example:3128"
)
YAML = "the kubeconfig is not valid YAML or JSON"
EMPTY = "the kubeconfig is empty: store the kubeconfig itself in the Secret"
CA_PATH = "clusters[].cluster.certificate-authority-data"
CERT_PATH = "users[].user.client-certificate-data"
KEY_PATH = "users[].user.client-key-data"

REFUSALS = [
    # --- the text -------------------------------------------------------------------------------
    pytest.param(
        text("#" * (MAX_SIZE + 1)),
        Code.TOO_LARGE,
        "the kubeconfig is larger than 1 MiB: keep only the context Kokumi uses, with its cluster "
        f"and user, {FLATTEN}",
        id="too-large",
    ),
    pytest.param(
        text("[" * 500),
        Code.NOT_YAML,
        "the kubeconfig nests deeper than 64 levels: a kubeconfig is a few levels deep; write it "
        "as kubectl config view --minify --flatten does",
        id="nested-too-deep",
    ),
    pytest.param(
        text("x: [" + ",".join(["1"] * 100_000) + "]"),
        Code.TOO_COMPLEX,
        "the kubeconfig holds more than 100,000 YAML values, mappings and lists: keep only the "
        f"contexts Kokumi uses, with their clusters and users, {FLATTEN}",
        id="too-many-events",
    ),
    pytest.param(
        lambda: b"\xff" + s.dump(s.kubeconfig()).encode(),
        Code.NOT_YAML,
        "the kubeconfig is not UTF-8 text: save it as UTF-8",
        id="not-utf8",
    ),
    pytest.param(
        text("clusters: [\n"),
        Code.NOT_YAML,
        f"{YAML} (line 2, column 1: did not find expected node content): fix its syntax",
        id="yaml-unclosed",
    ),
    pytest.param(
        text("current-context: a: b"),
        Code.NOT_YAML,
        f"{YAML} (line 1, column 19: mapping values are not allowed in this context): fix its "
        "syntax",
        id="yaml-mapping",
    ),
    pytest.param(
        lambda: s.dump(s.kubeconfig()) + "---\n" + s.dump(s.kubeconfig()),
        Code.NOT_YAML,
        f"{YAML} (line 19, column 1: expected a single document in the stream but found another "
        "document): fix its syntax",
        id="yaml-two-documents",
    ),
    pytest.param(
        text(f"users:\n- name: kokumi\n  user:\n    token: '{s.TOKEN}\n"),
        Code.NOT_YAML,
        f"{YAML} (line 5, column 1: found unexpected end of stream): fix its syntax",
        id="yaml-unclosed-quote",
    ),
    pytest.param(
        text(f"users: [{{name: kokumi, user: {{token: !secret {s.TOKEN}}}}}]"),
        Code.NOT_YAML,
        f"{YAML} (line 1, column 38: could not determine a constructor for the tag …): fix its "
        "syntax",
        id="yaml-tag",
    ),
    pytest.param(
        text('{"current-context": "a\\ud800"}'),
        Code.NOT_YAML,
        f"{YAML} (line 1, column 25: found invalid Unicode character escape code): fix its syntax",
        id="json-lone-surrogate",
    ),
    pytest.param(
        # A timestamp stays text, as kubectl reads it into its string field.
        text("current-context: 2001-02-30"),
        Code.UNKNOWN_CONTEXT,
        'current context "2001-02-30" is not in contexts (current-context): name one that is '
        "there, or add the context",
        id="yaml-date-is-text",
    ),
    pytest.param(
        text("current-context: 0b_"),
        Code.NOT_YAML,
        f"{YAML} (a value cannot be read): fix its syntax",
        id="yaml-number-without-digits",
    ),
    pytest.param(
        text("current-context: &a spoke\ncontexts: [{name: *a}]"),
        Code.NOT_YAML,
        "the kubeconfig uses YAML anchors or aliases (&, *) (line 1, column 18), which a "
        "kubeconfig has no need of: write each value out",
        id="yaml-anchor",
    ),
    pytest.param(
        text("current-context: *a"),
        Code.NOT_YAML,
        "the kubeconfig uses YAML anchors or aliases (&, *) (line 1, column 18), which a "
        "kubeconfig has no need of: write each value out",
        id="yaml-alias",
    ),
    pytest.param(
        text("contexts:\n- name: spoke\n  context: {<<: {cluster: spoke}}\n"),
        Code.NOT_YAML,
        "the kubeconfig uses a YAML merge key (<<) (line 3, column 13), which a kubeconfig has "
        "no need of: write the mapping out",
        id="yaml-merge-key",
    ),
    pytest.param(
        text("current-context: " + "9" * 101),
        Code.NOT_YAML,
        "the kubeconfig holds a number longer than 100 characters, which no kubeconfig field "
        "is: quote it if it is text",
        id="yaml-long-number",
    ),
    pytest.param(
        with_line("server:", "    server: https://other.example:6443\n"),
        Code.DUPLICATE_KEY,
        repeated("server", 7, 5),
        id="repeated-server",
    ),
    pytest.param(
        lambda: s.dump(s.kubeconfig()) + "clusters: []\n",
        Code.DUPLICATE_KEY,
        repeated("clusters", 19, 1),
        id="repeated-clusters",
    ),
    pytest.param(
        text('{current-context: a, "current-context": b}'),
        Code.DUPLICATE_KEY,
        repeated("current-context", 1, 22),
        id="repeated-key-quoted-once",
    ),
    pytest.param(
        with_line('"server"', '        "serv\\u0065r": "https://other.example:6443",\n', "json"),
        Code.DUPLICATE_KEY,
        repeated("server", 9, 9),
        id="json-repeated-key-escaped-once",
    ),
    pytest.param(
        # Not a kubeconfig's field: text of the author's, never quoted.
        text(f"preferences: {{{s.TOKEN}: 1, '{s.TOKEN}': 2}}\ncurrent-context: x"),
        Code.DUPLICATE_KEY,
        repeated(None, 1, len(s.TOKEN) + 20),
        id="repeated-key-of-any-text",
    ),
    pytest.param(
        text(f'{{"preferences": {{"{s.TOKEN}": 1, "{s.TOKEN}": 2}}}}'),
        Code.DUPLICATE_KEY,
        repeated(None, 1, len(s.TOKEN) + 25),
        id="json-repeated-key-of-any-text",
    ),
    pytest.param(text(""), Code.EMPTY, EMPTY, id="empty"),
    pytest.param(text("# nothing but a comment\n"), Code.EMPTY, EMPTY, id="comment"),
    pytest.param(text("null"), Code.EMPTY, EMPTY, id="null"),
    # --- the document ---------------------------------------------------------------------------
    pytest.param(
        text("- spoke\n- hub\n"),
        Code.NOT_KUBECONFIG,
        "the kubeconfig is a list, not a mapping: store a kubeconfig, with clusters, contexts, "
        "users and current-context",
        id="list",
    ),
    pytest.param(
        text(s.TOKEN),
        Code.NOT_KUBECONFIG,
        "the kubeconfig is a string, not a mapping: store a kubeconfig, with clusters, contexts, "
        "users and current-context",
        id="string",
    ),
    pytest.param(
        lambda: s.ca_pem().decode(),
        Code.NOT_KUBECONFIG,
        "the kubeconfig is a PEM certificate (CERTIFICATE), not a kubeconfig: store the "
        "kubeconfig; a CA certificate belongs in its cluster's certificate-authority-data",
        id="pem-certificate",
    ),
    pytest.param(
        lambda: s.ca_bundle_pem().decode(),
        Code.NOT_KUBECONFIG,
        "the kubeconfig is a PEM certificate (CERTIFICATE), not a kubeconfig: store the "
        "kubeconfig; a CA certificate belongs in its cluster's certificate-authority-data",
        id="pem-bundle",
    ),
    pytest.param(
        lambda: s.lone_key_pem("ec").decode(),
        Code.NOT_KUBECONFIG,
        "the kubeconfig is a PEM private key (PRIVATE KEY), not a kubeconfig: store the "
        "kubeconfig; a client key belongs in its user's client-key-data",
        id="pem-key",
    ),
    pytest.param(
        text("-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n"),
        Code.NOT_KUBECONFIG,
        "the kubeconfig is a PEM block (PUBLIC KEY), not a kubeconfig: store the kubeconfig",
        id="pem-other",
    ),
    pytest.param(
        lambda: base64.b64encode(s.dump(s.kubeconfig()).encode()).decode(),
        Code.NOT_KUBECONFIG,
        "the kubeconfig is base64-encoded once more than it should be: store the kubeconfig's "
        "text (the Secret's data is base64 of it, nothing more)",
        id="base64-twice",
    ),
    pytest.param(
        text('["https://spoke.example:6443", "token"]'),
        Code.NOT_KUBECONFIG,
        "the kubeconfig is a list, not a mapping: store a kubeconfig, with clusters, contexts, "
        "users and current-context",
        id="json-array",
    ),
    pytest.param(
        text("apiVersion: v1\nkind: Secret\ndata:\n  value: Zm9v\n"),
        Code.NOT_KUBECONFIG,
        "the document's kind is not Config (kind): store a kubeconfig, not another object",
        id="kind",
    ),
    pytest.param(
        lambda: edit(lambda d: d.update(apiVersion="v2")),
        Code.NOT_KUBECONFIG,
        "the kubeconfig's apiVersion is not v1 (apiVersion): set it to v1",
        id="api-version",
    ),
    pytest.param(
        text('{"server": "https://spoke.example:6443", "token": "abc"}'),
        Code.NOT_KUBECONFIG,
        "the document has none of a kubeconfig's fields (clusters, contexts, users, "
        "current-context): store a kubeconfig",
        id="no-kubeconfig-fields",
    ),
    pytest.param(
        lambda: edit(lambda d: d.update(clusters={"spoke": cluster(d)})),
        Code.WRONG_TYPE,
        "the kubeconfig has clusters as a mapping, not a list (clusters): write it as a list",
        id="clusters-mapping",
    ),
    pytest.param(
        lambda: edit(lambda d: d.update({"current-context": 7})),
        Code.WRONG_TYPE,
        "the kubeconfig has current-context as a number, not a string (current-context): quote "
        "the value",
        id="current-context-number",
    ),
    pytest.param(
        lambda: edit(lambda d: d["contexts"][0].update(context="spoke")),
        Code.WRONG_TYPE,
        f"{X} has context as a string, not a mapping (contexts[].context): write it as a mapping",
        id="context-string",
    ),
    pytest.param(
        lambda: edit(lambda d: context(d).update(user=["kokumi"])),
        Code.WRONG_TYPE,
        f"{X} has user as a list, not a string (contexts[].context.user): quote the value",
        id="context-user-list",
    ),
    # --- extensions -----------------------------------------------------------------------------
    pytest.param(
        lambda: edit(lambda d: d.update(extensions=[{"name": "x", "extension": {}}])),
        Code.EXTENSION,
        "the kubeconfig has extensions (extensions), which Kokumi does not apply: remove them",
        id="extensions-top",
    ),
    pytest.param(
        lambda: edit(lambda d: d.update(preferences={"extensions": [{"name": "x"}]})),
        Code.EXTENSION,
        "the kubeconfig has extensions (preferences.extensions), which Kokumi does not apply: "
        "remove them",
        id="extensions-preferences",
    ),
    pytest.param(
        lambda: edit(lambda d: context(d).update(extensions=[{"name": "x", "extension": {}}])),
        Code.EXTENSION,
        f"{X} has extensions (contexts[].context.extensions), which Kokumi does not apply: "
        "remove them",
        id="extensions-context",
    ),
    pytest.param(
        set_cluster(extensions=[{"name": "proxy", "extension": {"socks": True}}]),
        Code.EXTENSION,
        f"{C} has extensions (clusters[].cluster.extensions), which Kokumi does not apply: "
        "remove them",
        id="extensions-cluster",
    ),
    pytest.param(
        set_user(extensions=[{"name": "x", "extension": {}}]),
        Code.EXTENSION,
        f"{U} has extensions (users[].user.extensions), which Kokumi does not apply: remove them",
        id="extensions-user",
    ),
    # --- the current context, its cluster and its user ------------------------------------------
    pytest.param(
        lambda: edit(lambda d: d.pop("current-context")),
        Code.NO_CURRENT_CONTEXT,
        "the kubeconfig has no current context (current-context): set it to the context Kokumi "
        "should use, e.g. with kubectl config use-context",
        id="no-current-context",
    ),
    pytest.param(
        lambda: edit(lambda d: d.update({"current-context": ""})),
        Code.NO_CURRENT_CONTEXT,
        "the kubeconfig has no current context (current-context): set it to the context Kokumi "
        "should use, e.g. with kubectl config use-context",
        id="empty-current-context",
    ),
    pytest.param(
        lambda: edit(lambda d: d.update({"current-context": "hub"})),
        Code.UNKNOWN_CONTEXT,
        'current context "hub" is not in contexts (current-context): name one that is there, or '
        "add the context",
        id="unknown-context",
    ),
    pytest.param(
        lambda: edit(lambda d: d.update({"current-context": "a\nb\u2028c"})),
        Code.UNKNOWN_CONTEXT,
        'current context "a\\nb\\u2028c" is not in contexts (current-context): name one that is '
        "there, or add the context",
        id="unknown-context-line-breaks",
    ),
    pytest.param(
        lambda: edit(lambda d: d.update({"current-context": "x" * 150})),
        Code.UNKNOWN_CONTEXT,
        f'current context "{"x" * 100}…" is not in contexts (current-context): name one that is '
        "there, or add the context",
        id="unknown-context-long",
    ),
    pytest.param(
        lambda: edit(lambda d: d["contexts"].append(d["contexts"][0])),
        Code.DUPLICATE_NAME,
        f"{X} appears 2 times in contexts (contexts[].name): keep one",
        id="duplicate-context",
    ),
    pytest.param(
        lambda: edit(lambda d: d["clusters"].append(d["clusters"][0])),
        Code.DUPLICATE_NAME,
        f"{C} appears 2 times in clusters (clusters[].name): keep one",
        id="duplicate-cluster",
    ),
    pytest.param(
        lambda: edit(lambda d: d["users"].extend([d["users"][0], d["users"][0]])),
        Code.DUPLICATE_NAME,
        f"{U} appears 3 times in users (users[].name): keep one",
        id="duplicate-user",
    ),
    pytest.param(
        lambda: edit(lambda d: context(d).pop("cluster")),
        Code.UNKNOWN_CLUSTER,
        f"{X} names no cluster (contexts[].context.cluster): set it to the name of an entry of "
        "clusters",
        id="context-without-cluster",
    ),
    pytest.param(
        lambda: edit(lambda d: context(d).update(cluster="hub")),
        Code.UNKNOWN_CLUSTER,
        f'{X} names cluster "hub", which is not in clusters (contexts[].context.cluster): add the '
        "cluster or name one that is there",
        id="unknown-cluster",
    ),
    pytest.param(
        lambda: edit(lambda d: context(d).pop("user")),
        Code.UNKNOWN_USER,
        f"{X} names no user (contexts[].context.user): set it to the name of an entry of users",
        id="context-without-user",
    ),
    pytest.param(
        lambda: edit(lambda d: d.pop("users")),
        Code.UNKNOWN_USER,
        f"{X} names {U}, which is not in users (contexts[].context.user): add the user or name "
        "one that is there",
        id="unknown-user",
    ),
    # --- mechanisms Kokumi does not carry over --------------------------------------------------
    pytest.param(
        set_user(exec={"apiVersion": "client.authentication.k8s.io/v1", "command": "aws"}),
        Code.EXEC_PLUGIN,
        f"{U} uses an exec plugin (users[].user.exec), which Kokumi does not run: {INLINE}",
        id="exec",
    ),
    pytest.param(
        set_user(auth_provider={"name": "oidc", "config": {"id-token": s.TOKEN}}),
        Code.AUTH_PROVIDER,
        f"{U} uses an auth provider (users[].user.auth-provider), which Kokumi does not run: "
        f"{INLINE}",
        id="auth-provider",
    ),
    pytest.param(
        set_user(username="admin", password="hunter2"),
        Code.BASIC_AUTH,
        f"{U} uses basic authentication (users[].user.username, password), which Kubernetes does "
        f"not offer: {INLINE}",
        id="basic-auth",
    ),
    pytest.param(
        set_user(password="hunter2"),
        Code.BASIC_AUTH,
        f"{U} uses basic authentication (users[].user.password), which Kubernetes does not "
        f"offer: {INLINE}",
        id="basic-auth-password",
    ),
    pytest.param(
        set_user(client_certificate="/home/me/.kube/client.crt"),
        Code.FILE_PATH,
        f"{U} reads its client certificate from a file (users[].user.client-certificate), which "
        f"Kokumi cannot read: embed it as client-certificate-data, {FLATTEN}",
        id="file-client-certificate",
    ),
    pytest.param(
        set_user(client_key="/home/me/.kube/client.key"),
        Code.FILE_PATH,
        f"{U} reads its client key from a file (users[].user.client-key), which Kokumi cannot "
        f"read: embed it as client-key-data, {FLATTEN}",
        id="file-client-key",
    ),
    pytest.param(
        lambda: edit(lambda d: user(d).update(tokenFile="/var/run/secrets/token")),
        Code.FILE_PATH,
        f"{U} reads its token from a file (users[].user.tokenFile), which Kokumi cannot read: put "
        "the token itself into token",
        id="file-token",
    ),
    pytest.param(
        set_cluster(certificate_authority="/etc/kubernetes/pki/ca.crt"),
        Code.FILE_PATH,
        f"{C} reads its CA from a file (clusters[].cluster.certificate-authority), which Kokumi "
        f"cannot read: embed it as certificate-authority-data, {FLATTEN}",
        id="file-certificate-authority",
    ),
    pytest.param(
        set_user(as_groups=["system:masters"]),
        Code.IMPERSONATION,
        f"{U} impersonates another identity (users[].user.as-groups), which Kokumi does not do: "
        "use a credential of the identity Kokumi should act as",
        id="impersonation",
    ),
    # --- the server -----------------------------------------------------------------------------
    pytest.param(
        lambda: edit(lambda d: cluster(d).pop("server")),
        Code.NO_SERVER,
        f"{C} has no server (clusters[].cluster.server): set it to the API server's URL as "
        "Kokumi's cluster reaches it, e.g. https://spoke.example:6443",
        id="no-server",
    ),
    pytest.param(
        set_cluster(server="spoke.example:6443"), Code.INVALID_SERVER, NOT_URL, id="no-scheme"
    ),
    pytest.param(set_cluster(server="ftp://spoke.example"), Code.INVALID_SERVER, NOT_URL, id="ftp"),
    pytest.param(set_cluster(server="https://"), Code.INVALID_SERVER, NOT_URL, id="no-host"),
    pytest.param(
        set_cluster(server="https://spoke.example:99999"), Code.INVALID_SERVER, NOT_URL, id="port"
    ),
    pytest.param(set_cluster(server="https://[fd00::1"), Code.INVALID_SERVER, NOT_URL, id="ipv6"),
    pytest.param(
        set_cluster(server="https://spoke.example\n"), Code.INVALID_SERVER, NOT_URL, id="newline"
    ),
    pytest.param(set_cluster(server="/api"), Code.INVALID_SERVER, NOT_URL, id="relative"),
    pytest.param(
        set_cluster(server="https://admin:secret@spoke.example:6443"),
        Code.INVALID_SERVER,
        f"{C} has a user name or password in its server URL (clusters[].cluster.server): remove "
        "them and put the credential into the user",
        id="server-userinfo",
    ),
    pytest.param(
        set_cluster(server="https://spoke.example:6443/?timeout=5s"),
        Code.INVALID_SERVER,
        f"{C} has a query or fragment in its server URL (clusters[].cluster.server): write it as "
        "https://host:port, with a path only if the API server is served under one",
        id="server-query",
    ),
    pytest.param(
        set_cluster(server=6443),
        Code.WRONG_TYPE,
        f"{C} has server as a number, not a string (clusters[].cluster.server): quote the value",
        id="server-number",
    ),
    # --- TLS and the proxy ----------------------------------------------------------------------
    pytest.param(
        set_cluster(proxy_url="ftp://proxy.example"),
        Code.INVALID_PROXY_URL,
        NOT_PROXY,
        id="proxy-ftp",
    ),
    pytest.param(
        set_cluster(proxy_url="proxy.example:3128"),
        Code.INVALID_PROXY_URL,
        NOT_PROXY,
        id="proxy-no-scheme",
    ),
    pytest.param(
        set_cluster(proxy_url="socks4://proxy.example"),
        Code.INVALID_PROXY_URL,
        NOT_PROXY,
        id="proxy-socks4",
    ),
    pytest.param(
        set_cluster(tls_server_name="spoke example"),
        Code.INVALID_TLS_SERVER_NAME,
        f"{C} has a tls-server-name that is not a host name (clusters[].cluster.tls-server-name): "
        "set it to a name in the API server's certificate",
        id="tls-server-name",
    ),
    pytest.param(
        set_cluster(tls_server_name=f"{'x' * 64}.example"),
        Code.INVALID_TLS_SERVER_NAME,
        f"{C} has a tls-server-name that is not a host name (clusters[].cluster.tls-server-name): "
        "set it to a name in the API server's certificate",
        id="tls-server-name-long-label",
    ),
    pytest.param(
        set_cluster(server=f"https://{'x' * 64}.example:6443"),
        Code.INVALID_SERVER,
        f"{C} has a server whose host name has an empty label or one over 63 characters "
        "(clusters[].cluster.server): write the API server's DNS name or address",
        id="server-long-label",
    ),
    pytest.param(
        set_cluster(server="https://spoke..example:6443"),
        Code.INVALID_SERVER,
        f"{C} has a server whose host name has an empty label or one over 63 characters "
        "(clusters[].cluster.server): write the API server's DNS name or address",
        id="server-empty-label",
    ),
    pytest.param(
        set_cluster(insecure_skip_tls_verify="true"),
        Code.WRONG_TYPE,
        f"{C} has insecure-skip-tls-verify as a string, not a boolean "
        "(clusters[].cluster.insecure-skip-tls-verify): write true or false, without quotes",
        id="insecure-string",
    ),
    pytest.param(
        set_cluster(insecure_skip_tls_verify=True),
        Code.INSECURE_WITH_CA,
        f"{C} has both certificate-authority-data and insecure-skip-tls-verify "
        "(clusters[].cluster.insecure-skip-tls-verify), which kubectl refuses too: keep the CA "
        "and remove insecure-skip-tls-verify",
        id="insecure-with-ca",
    ),
    pytest.param(
        set_cluster(certificate_authority_data="not base64!"),
        Code.INVALID_CERTIFICATE_AUTHORITY,
        f"{C} has certificate-authority-data that is not base64 ({CA_PATH}): put the base64 of "
        "the PEM file there, e.g. from base64 -w0",
        id="ca-not-base64",
    ),
    pytest.param(
        lambda: edit(
            lambda d: cluster(d).update({"certificate-authority-data": s.b64(s.ca_pem())[:-2]})
        ),
        Code.INVALID_CERTIFICATE_AUTHORITY,
        f"{C} has certificate-authority-data that is not base64 ({CA_PATH}): put the base64 of "
        "the PEM file there, e.g. from base64 -w0",
        id="ca-base64-padding",
    ),
    pytest.param(
        lambda: edit(
            lambda d: cluster(d).update(
                {"certificate-authority-data": s.b64(s.b64(s.ca_pem()).encode())}
            )
        ),
        Code.INVALID_CERTIFICATE_AUTHORITY,
        f"{C} has certificate-authority-data encoded in base64 twice ({CA_PATH}): decode it once",
        id="ca-base64-twice",
    ),
    pytest.param(
        lambda: edit(
            lambda d: cluster(d).update(
                {"certificate-authority-data": s.b64(s.ca_pem() + s.lone_key_pem("ec"))}
            )
        ),
        Code.INVALID_CERTIFICATE_AUTHORITY,
        f"{C} has a private key in certificate-authority-data ({CA_PATH}): keep only the CA's "
        "certificates there, and replace the key, since it has been shared",
        id="ca-private-key",
    ),
    pytest.param(
        set_cluster(certificate_authority_data=s.b64(b"just some text")),
        Code.INVALID_CERTIFICATE_AUTHORITY,
        f"{C} has certificate-authority-data that holds no PEM certificate ({CA_PATH}): put the "
        "base64 of the CA's PEM certificates there",
        id="ca-no-pem",
    ),
    pytest.param(
        set_cluster(
            certificate_authority_data=s.b64(
                b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
            )
        ),
        Code.INVALID_CERTIFICATE_AUTHORITY,
        f"{C} has certificate-authority-data with a certificate that does not parse ({CA_PATH}): "
        "put the base64 of the CA's PEM certificates there",
        id="ca-does-not-parse",
    ),
    # --- credentials ----------------------------------------------------------------------------
    pytest.param(
        only_user(),
        Code.NO_CREDENTIAL,
        f"{U} has no credential (users[].user): add a token, or client-certificate-data and "
        "client-key-data",
        id="no-credential",
    ),
    pytest.param(
        lambda: edit(lambda d: d["users"][0].pop("user")),
        Code.NO_CREDENTIAL,
        f"{U} has no credential (users[].user): add a token, or client-certificate-data and "
        "client-key-data",
        id="user-without-body",
    ),
    pytest.param(
        only_user(token=""),
        Code.NO_CREDENTIAL,
        f"{U} has no credential (users[].user): add a token, or client-certificate-data and "
        "client-key-data",
        id="empty-token",
    ),
    pytest.param(
        only_user(token=s.TOKEN + "\n"),
        Code.INVALID_TOKEN,
        f"{U} has whitespace in its token (users[].user.token): copy the token without spaces or "
        "line breaks",
        id="token-newline",
    ),
    pytest.param(
        only_user(token="Bearer " + s.TOKEN),
        Code.INVALID_TOKEN,
        f"{U} has whitespace in its token (users[].user.token): copy the token without spaces or "
        "line breaks",
        id="token-space",
    ),
    pytest.param(
        only_user(token=s.TOKEN + "é"),
        Code.INVALID_TOKEN,
        f"{U} has characters in its token that cannot go into an HTTP header "
        "(users[].user.token): copy the token as its Secret holds it, decoded from base64",
        id="token-non-ascii",
    ),
    pytest.param(
        text(
            "current-context: spoke\ncontexts: [{name: spoke, context: {cluster: spoke, user: "
            "kokumi}}]\nclusters: [{name: spoke, cluster: {server: 'https://spoke.example'}}]\n"
            "users: [{name: kokumi, user: {token: 1234567890}}]\n"
        ),
        Code.WRONG_TYPE,
        f"{U} has token as a number, not a string (users[].user.token): quote the value",
        id="token-number",
    ),
    pytest.param(
        lambda: certificate_user(client_certificate(), client_key())().replace(
            "client-key-data", "client-key-dataa"
        ),
        Code.INCOMPLETE_CLIENT_CERTIFICATE,
        f"{U} has client-certificate-data but no client-key-data ({KEY_PATH}): add the key the "
        "certificate was issued for",
        id="certificate-without-key",
    ),
    pytest.param(
        only_user(client_key_data=s.b64(client_key())),
        Code.INCOMPLETE_CLIENT_CERTIFICATE,
        f"{U} has client-key-data but no client-certificate-data ({CERT_PATH}): add the "
        "certificate issued for the key",
        id="key-without-certificate",
    ),
    pytest.param(
        only_user(client_certificate_data="@@@", client_key_data=s.b64(client_key())),
        Code.INVALID_CLIENT_CERTIFICATE,
        f"{U} has client-certificate-data that is not base64 ({CERT_PATH}): put the base64 of the "
        "PEM file there, e.g. from base64 -w0",
        id="certificate-not-base64",
    ),
    pytest.param(
        only_user(
            client_certificate_data=s.b64(s.b64(client_certificate()).encode()),
            client_key_data=s.b64(client_key()),
        ),
        Code.INVALID_CLIENT_CERTIFICATE,
        f"{U} has client-certificate-data encoded in base64 twice ({CERT_PATH}): decode it once",
        id="certificate-base64-twice",
    ),
    pytest.param(
        only_user(
            client_certificate_data=s.b64(client_certificate()),
            client_key_data=s.b64(client_key())[:-1],
        ),
        Code.INVALID_CLIENT_KEY,
        f"{U} has client-key-data that is not base64 ({KEY_PATH}): put the base64 of the PEM file "
        "there, e.g. from base64 -w0",
        id="key-not-base64",
    ),
    pytest.param(
        certificate_user(client_key(), client_key()),
        Code.INVALID_CLIENT_CERTIFICATE,
        f"{U} has client-certificate-data that holds no PEM certificate ({CERT_PATH}): put the "
        "base64 of the client's PEM certificate there",
        id="certificate-no-pem",
    ),
    pytest.param(
        certificate_user(
            b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", client_key()
        ),
        Code.INVALID_CLIENT_CERTIFICATE,
        f"{U} has client-certificate-data with a certificate that does not parse ({CERT_PATH}): "
        "put the base64 of the client's PEM certificate there",
        id="certificate-does-not-parse",
    ),
    pytest.param(
        only_user(
            client_certificate_data=s.b64(client_certificate()),
            client_key_data=s.b64(s.b64(client_key()).encode()),
        ),
        Code.INVALID_CLIENT_KEY,
        f"{U} has client-key-data encoded in base64 twice ({KEY_PATH}): decode it once",
        id="key-base64-twice",
    ),
    pytest.param(
        certificate_user(client_certificate(), client_certificate()),
        Code.INVALID_CLIENT_KEY,
        f"{U} has client-key-data that holds no PEM private key ({KEY_PATH}): put the base64 of "
        "the client's PEM private key there",
        id="key-no-pem",
    ),
    pytest.param(
        certificate_user(client_certificate(), s.encrypted_key_pem()),
        Code.INVALID_CLIENT_KEY,
        f"{U} has client-key-data that is encrypted ({KEY_PATH}): store the key unencrypted, e.g. "
        "from openssl pkey -in key.pem",
        id="key-encrypted",
    ),
    pytest.param(
        certificate_user(client_certificate(), _pem_block("PRIVATE KEY", b"MIIB")),
        Code.INVALID_CLIENT_KEY,
        f"{U} has client-key-data with a private key that does not parse ({KEY_PATH}): put the "
        "base64 of the client's PEM private key there",
        id="key-does-not-parse",
    ),
    pytest.param(
        certificate_user(client_certificate(), s.small_rsa_key_pem(512)),
        Code.INVALID_CLIENT_KEY,
        f"{U} has an RSA client key of 512 bits ({KEY_PATH}): use one of 1024 to 8192 bits, as "
        "Kubernetes clients accept",
        id="key-rsa-512",
    ),
    pytest.param(
        certificate_user(client_certificate(), s.lone_key_pem("secp256k1")),
        Code.INVALID_CLIENT_KEY,
        f"{U} has an EC client key on a curve TLS clients do not sign with ({KEY_PATH}): use "
        "P-256, P-384 or P-521",
        id="key-secp256k1",
    ),
    pytest.param(
        certificate_user(client_certificate(), s.lone_key_pem("ed448")),
        Code.INVALID_CLIENT_KEY,
        f"{U} has a client key of a type TLS clients do not sign with ({KEY_PATH}): use an RSA, "
        "ECDSA or Ed25519 key",
        id="key-ed448",
    ),
    pytest.param(
        certificate_user(client_certificate(), s.client_pair("ec", 1)[1]),
        Code.CLIENT_KEY_MISMATCH,
        f"{U} has a client key that does not belong to its client certificate ({KEY_PATH}): use "
        "the key the certificate was issued for",
        id="key-mismatch",
    ),
    pytest.param(
        certificate_user(client_certificate(), s.client_pair("rsa")[1]),
        Code.CLIENT_KEY_MISMATCH,
        f"{U} has a client key that does not belong to its client certificate ({KEY_PATH}): use "
        "the key the certificate was issued for",
        id="key-mismatch-type",
    ),
    pytest.param(
        certificate_user(s.client_pair("rsa")[0], s.lone_key_pem("rsa")),
        Code.CLIENT_KEY_MISMATCH,
        f"{U} has a client key that does not belong to its client certificate ({KEY_PATH}): use "
        "the key the certificate was issued for",
        id="key-mismatch-rsa",
    ),
]


@pytest.mark.parametrize(("make", "code", "message"), REFUSALS)
def test_refusal(make: Callable[[], str | bytes], code: Code, message: str) -> None:
    assert parse(make()) == Refusal(code.value, message)


# Refusals that need more than a text to happen.
ASKED_FOR_UNKNOWN_CONTEXT = Refusal(
    "UnknownContext", 'context "hub" is not in contexts (contexts[].name): name one that is there'
)
TOO_COMPLEX = Refusal(
    "TooComplex",
    "reading the kubeconfig took more than 2 s of CPU: keep only the context Kokumi uses, with "
    "its cluster and user, e.g. with kubectl config view --minify --flatten",
)
INTERNAL_ERROR = Refusal(
    "InternalError",
    "Kokumi failed to read the kubeconfig (RuntimeError), which is a bug in Kokumi, not in the "
    "kubeconfig: report it with Kokumi's version",
)


def test_refusal_of_an_unknown_context_asked_for() -> None:
    assert parse(s.dump(s.kubeconfig()), context="hub") == ASKED_FOR_UNKNOWN_CONTEXT


def test_a_bug_becomes_a_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    """The actor calling parse must survive a bug here; the message names no kubeconfig content."""

    def broken(*args: object) -> Connection:
        raise RuntimeError(s.TOKEN)

    monkeypatch.setattr(reader, "_connection", broken)
    assert parse(s.dump(s.kubeconfig())) == INTERNAL_ERROR


def test_every_refusal_shows_as_invalid_kubeconfig() -> None:
    assert Refusal("ExecPlugin", "…").reason == REASON
    assert f"{REASON}" == "InvalidKubeconfig"


# --- the reasons document -----------------------------------------------------------------------


def documented_messages() -> list[tuple[str, str]]:
    """(code, message template) of each row of the InvalidKubeconfig table in docs/reasons.md."""
    section = DOCS.read_text().split("## InvalidKubeconfig", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `(\w+)` \| `([^`]+)` \|$", section, flags=re.MULTILINE)


def template_pattern(template: str) -> re.Pattern[str]:
    return re.compile(re.sub(r"<[a-z-]+>", ".+", re.escape(template)))


def test_every_code_is_documented() -> None:
    assert {code for code, _ in documented_messages()} == {code.value for code in Code}


def test_every_message_is_documented_and_every_documented_message_occurs() -> None:
    """The table cases above produce each message there is; docs/reasons.md lists them all."""
    rows = [(code, template_pattern(template)) for code, template in documented_messages()]
    seen: set[int] = set()
    produced = [ASKED_FOR_UNKNOWN_CONTEXT, INTERNAL_ERROR, TOO_COMPLEX]
    for param in REFUSALS:
        _, code, message = param.values
        assert isinstance(code, Code)
        assert isinstance(message, str)
        produced.append(Refusal(code.value, message))
    for refusal in produced:
        matches = [
            i
            for i, (code, pattern) in enumerate(rows)
            if code == refusal.code and pattern.fullmatch(refusal.message)
        ]
        assert matches, f"not in docs/reasons.md: {refusal}"
        seen.update(matches)
    assert [
        template for i, (_, template) in enumerate(documented_messages()) if i not in seen
    ] == []


# --- accepted kubeconfigs -----------------------------------------------------------------------


def expected(**fields: Any) -> Connection:
    base: dict[str, Any] = {
        "server": s.SERVER,
        "token": s.TOKEN,
        "certificate_authority": s.ca_pem(),
    }
    return Connection(**{**base, **fields})


ACCEPTED = [
    pytest.param(lambda: s.dump(s.kubeconfig()), expected(), id="token-and-ca"),
    pytest.param(lambda: s.dump(s.kubeconfig(), "json"), expected(), id="json"),
    pytest.param(
        lambda: s.dump(s.kubeconfig(), "json").replace(",\n", ",\n\t"),
        expected(),
        id="json-with-tabs",
    ),
    pytest.param(
        lambda: json.dumps(s.kubeconfig()).replace("/", "\\/"),
        expected(),
        id="json-escaped-slashes",
    ),
    pytest.param(
        lambda: ("\ufeff" + s.dump(s.kubeconfig())).encode("utf-8"), expected(), id="bytes-bom"
    ),
    pytest.param(
        lambda: edit(lambda d: [d.pop("apiVersion"), d.pop("kind"), d.pop("preferences")]),
        expected(),
        id="bare",
    ),
    pytest.param(
        lambda: edit(lambda d: cluster(d).pop("certificate-authority-data")),
        expected(certificate_authority=None),
        id="token-only",
    ),
    *[
        pytest.param(
            lambda kind=kind: certificate_user(*s.client_pair(kind))(),
            kind,
            id=f"client-certificate-{kind}",
        )
        for kind in s.KEY_KINDS
    ],
    pytest.param(
        lambda: edit(
            lambda d: user(d).update(
                {
                    "client-certificate-data": s.b64(client_certificate()),
                    "client-key-data": s.b64(client_key()),
                }
            )
        ),
        "both",
        id="token-and-client-certificate",
    ),
    pytest.param(
        lambda: edit(
            lambda d: user(d).update(
                {
                    # a chain: the client's certificate first, as Go's tls.X509KeyPair reads it
                    "client-certificate-data": s.b64(client_certificate() + s.ca_pem()),
                    "client-key-data": s.b64(client_key()),
                    "token": "",
                }
            )
        ),
        "chain",
        id="client-certificate-chain",
    ),
    pytest.param(
        set_cluster(certificate_authority_data=s.b64(s.ca_bundle_pem())),
        "bundle",
        id="ca-bundle",
    ),
    pytest.param(
        lambda: edit(
            lambda d: cluster(d).update(
                {"certificate-authority-data": base64.encodebytes(s.ca_pem()).decode()}
            )
        ),
        expected(),
        id="ca-base64-with-line-breaks",
    ),
    pytest.param(
        set_cluster(tls_server_name="kubernetes.default.svc"),
        expected(tls_server_name="kubernetes.default.svc"),
        id="tls-server-name",
    ),
    *[
        pytest.param(
            set_cluster(proxy_url=proxy), expected(proxy_url=proxy), id=f"proxy-{proxy[:5]}"
        )
        for proxy in (
            "http://proxy.example:3128",
            "https://proxy.example",
            "socks5://127.0.0.1:1080",
            "http://user:secret@proxy.example:3128",
        )
    ],
    pytest.param(
        lambda: edit(
            lambda d: cluster(d).update(
                {"certificate-authority-data": None, "insecure-skip-tls-verify": True}
            )
        ),
        expected(certificate_authority=None, insecure_skip_tls_verify=True),
        id="insecure",
    ),
    pytest.param(
        set_cluster(insecure_skip_tls_verify=False), expected(), id="insecure-false-with-ca"
    ),
    *[
        pytest.param(set_cluster(server=server), expected(server=server), id=f"server-{server}")
        for server in (
            "https://spoke.example:6443/",
            "http://127.0.0.1:8080",
            "https://[fd00::7]:6443",
            "https://rancher.example/k8s/clusters/c-m-1234",
            "https://spoke.example",
        )
    ],
    pytest.param(
        lambda: edit(
            lambda d: user(d).update(
                {"exec": None, "username": "", "extensions": [], "auth-provider": {}, "as": ""}
            )
        ),
        expected(),
        id="empty-fields-are-absent",
    ),
    pytest.param(
        lambda: edit(
            lambda d: [
                d["users"].insert(0, {"name": "other", "user": {"exec": {"command": "aws"}}}),
                d["clusters"].append({"name": "other", "cluster": {"server": "ftp://x"}}),
                d["clusters"].append("not an entry"),
                d["contexts"].append({"name": "other", "context": 42}),
                d["users"].append({"name": "other", "user": {"password": "hunter2"}}),
                d["users"].append({"name": ["kokumi"], "user": {}}),
            ]
        ),
        expected(),
        id="other-entries-hold-anything",
    ),
    pytest.param(
        lambda: edit(
            lambda d: [
                context(d).update(namespace="team-a"),
                d.update(preferences={"colors": True}),
                cluster(d).update({"disable-compression": True}),
            ]
        ),
        expected(),
        id="fields-kokumi-does-not-need",
    ),
]


def _resolve(want: Connection | str) -> Connection:
    """Expectations that need the test PKI are named, so that collection generates no key."""
    if isinstance(want, Connection):
        return want
    if want in s.KEY_KINDS:
        certificate, key = s.client_pair(want)
        return expected(token=None, client_certificate=certificate, client_key=key)
    if want == "both":
        return expected(client_certificate=client_certificate(), client_key=client_key())
    if want == "chain":
        return expected(
            token=None,
            client_certificate=client_certificate() + s.ca_pem(),
            client_key=client_key(),
        )
    assert want == "bundle"
    return expected(certificate_authority=s.ca_bundle_pem())


@pytest.mark.parametrize(("make", "want"), ACCEPTED)
def test_accepted(make: Callable[[], str | bytes], want: Connection | str) -> None:
    assert parse(make()) == _resolve(want)


def test_another_context_can_be_asked_for() -> None:
    document = s.kubeconfig()
    document["contexts"].append({"name": "hub", "context": {"cluster": "hub", "user": "admin"}})
    document["clusters"].append({"name": "hub", "cluster": {"server": "https://hub.example"}})
    document["users"].append({"name": "admin", "user": {"token": "hub-token"}})
    assert parse(s.dump(document), context="hub") == Connection(
        server="https://hub.example", token="hub-token"
    )


def test_repr_shows_no_credential() -> None:
    connection = _resolve("both")
    assert s.TOKEN not in repr(connection)
    assert "PRIVATE KEY" not in repr(connection)


# --- minimise -----------------------------------------------------------------------------------


def test_minimise_keeps_one_context_its_cluster_and_its_user() -> None:
    document = s.kubeconfig()
    document["contexts"][0]["context"]["namespace"] = "team-a"
    document["contexts"].append({"name": "hub", "context": {"cluster": "hub", "user": "admin"}})
    document["clusters"].append({"name": "hub", "cluster": {"server": "https://hub.example"}})
    document["users"].append({"name": "admin", "user": {"exec": {"command": "aws"}}})
    minimal = minimise(s.dump(document))
    assert yaml.safe_load(minimal) == {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "spoke",
                "cluster": {
                    "server": s.SERVER,
                    "certificate-authority-data": s.b64(s.ca_pem()),
                },
            }
        ],
        "contexts": [{"name": "spoke", "context": {"cluster": "spoke", "user": "kokumi"}}],
        "current-context": "spoke",
        "users": [{"name": "kokumi", "user": {"token": s.TOKEN}}],
    }


def test_minimise_another_context() -> None:
    document = s.kubeconfig()
    document["contexts"].append({"name": "hub", "context": {"cluster": "hub", "user": "admin"}})
    document["clusters"].append({"name": "hub", "cluster": {"server": "https://hub.example"}})
    document["users"].append({"name": "admin", "user": {"token": "hub-token"}})
    minimal = minimise(s.dump(document), context="hub")
    assert parse(minimal) == Connection(server="https://hub.example", token="hub-token")
    assert yaml.safe_load(minimal)["current-context"] == "hub"


def test_examine_names_the_contexts_and_keeps_what_minimise_keeps() -> None:
    """One read for the New Cluster form: the names to offer, and the refusal parse would give."""
    document = s.kubeconfig()
    document["contexts"] += [
        {"name": "hub", "context": {"cluster": "hub", "user": "admin"}},
        {"name": ["not", "a", "name"]},
        "not an entry",
    ]
    document["clusters"].append({"name": "hub", "cluster": {"server": "https://hub.example"}})
    document["users"].append({"name": "admin", "user": {"token": "hub-token"}})
    text = s.dump(document)
    assert examine(text, "hub") == (
        ("hub", "spoke"),
        (minimise(text, context="hub"), "https://hub.example"),
    )
    assert examine(text) == (("hub", "spoke"), (minimise(text), s.SERVER))
    assert examine(text, "nope") == (("hub", "spoke"), parse(text, context="nope"))
    for unreadable in ("&a [*a]", "[a, b]", "contexts: {name: a}", ""):
        assert examine(unreadable) == ((), parse(unreadable))


@given(st.lists(st.text(min_size=1, max_size=12), min_size=3, max_size=3, unique=True))
@settings(max_examples=s.examples(200), deadline=None)
def test_minimise_keeps_any_name(names: list[str]) -> None:
    """Names with line separators, quotes or YAML's indicators come back as they were."""
    context_name, cluster_name, user_name = names
    document = s.kubeconfig(context=context_name, cluster_name=cluster_name, user_name=user_name)
    text = json.dumps(document)
    minimal = minimise(text)
    assert parse(minimal) == parse(text) == expected()
    written = yaml.safe_load(minimal)
    assert written["current-context"] == written["contexts"][0]["name"] == context_name
    assert written["clusters"][0]["name"] == written["contexts"][0]["context"]["cluster"]
    assert written["clusters"][0]["name"] == cluster_name
    assert written["users"][0]["name"] == written["contexts"][0]["context"]["user"] == user_name


def test_a_name_that_looks_like_a_number_without_digits_stays_text() -> None:
    """``._`` is text to PyYAML's resolver (a float needs a digit after its dot), so the reader
    takes it as text too, and ``minimise``, which PyYAML writes, reads back what it wrote."""
    for name in ("._", "-._", "._1"):
        document = s.kubeconfig(context="hub", cluster_name="c", user_name=name)
        minimal = minimise(json.dumps(document))
        assert parse(minimal) == expected(), name
        assert yaml.safe_load(minimal.replace(f"name: {name}", "name: x"))  # still a document


def test_minimise_refuses_what_parse_refuses() -> None:
    with pytest.raises(KubeconfigRefused) as raised:
        minimise(s.dump(s.kubeconfig()), context="hub")
    assert raised.value.refusal.code == "UnknownContext"
    assert str(raised.value) == raised.value.refusal.message


@given(s.valid_kubeconfigs(), st.sampled_from(["yaml", "json"]))
@settings(max_examples=s.examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_valid_kubeconfigs_give_their_connection_and_survive_minimise(
    case: tuple[Document, Connection], style: str
) -> None:
    document, connection = case
    text = s.dump(document, style)
    assert parse(text) == connection
    minimal = minimise(text)
    assert parse(minimal) == connection
    assert minimise(minimal) == minimal


# --- properties: parse is total and discreet ----------------------------------------------------


def assert_well_formed(result: Connection | Refusal, secrets: Sequence[str] = ()) -> None:
    assert isinstance(result, Connection | Refusal)
    if isinstance(result, Refusal):
        assert result.code in {code.value for code in Code}
        assert result.code != Code.INTERNAL_ERROR, result.message
        assert result.message
        assert result.message.splitlines() == [result.message]
        for secret in secrets:
            assert secret not in result.message


# The fuzzers below run at their CI size unless KUBECONFIG_FUZZ_EXAMPLES says otherwise: the soak
# session runs each at 100,000 examples.
FUZZ_EXAMPLES = int(os.environ.get("KUBECONFIG_FUZZ_EXAMPLES", "0"))


@given(st.data())
@settings(
    max_examples=FUZZ_EXAMPLES or s.examples(1000),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
def test_any_yaml_or_json_value_gives_a_connection_or_a_refusal(data: st.DataObject) -> None:
    value = data.draw(s.yaml_values() | s.kubeconfig_like_values(), label="value")
    style = data.draw(st.sampled_from(["yaml", "json"]), label="style")
    assert_well_formed(parse(s.dump(value, style)), [s.TOKEN, *s.secrets_of(_resolve("ec"))])


@given(st.text(max_size=200) | st.binary(max_size=200))
@settings(max_examples=FUZZ_EXAMPLES or s.examples(500), deadline=None)
def test_any_text_gives_a_connection_or_a_refusal(text: str | bytes) -> None:
    assert_well_formed(parse(text))


@given(s.mutated_kubeconfigs())
@settings(
    max_examples=FUZZ_EXAMPLES or s.examples(1000),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
def test_mutated_kubeconfigs_give_a_connection_or_a_refusal_that_quotes_no_secret(
    case: tuple[str | bytes, list[str]],
) -> None:
    text, secrets = case
    assert_well_formed(parse(text), secrets)


def test_a_proxy_password_never_shows_in_a_connections_repr() -> None:
    connection = Connection(
        server=s.SERVER, token="tok3n", proxy_url="http://alice:s3cret@proxy.example:3128"
    )
    shown = repr(connection)
    assert "s3cret" not in shown
    assert "alice" not in shown
    assert "tok3n" not in shown
    assert "proxy.example:3128" in shown


def test_deep_and_self_referencing_yaml_is_refused_not_raised() -> None:
    for text in (
        "[" * 100_000,
        "- " * 100_000 + "x",
        '{"a": ' * 100_000,
        "&a [*a]",
        "current-context: &a [*a]\ncontexts: &b [{name: x, context: *b}]",
    ):
        assert isinstance(parse(text), Refusal)


# --- hostile YAML: refused while the events are walked, never paid for ---------------------------

SLOWEST: list[float] = [0.0]


@given(s.hostile_kubeconfigs())
@settings(
    max_examples=FUZZ_EXAMPLES or s.examples(200),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
def test_hostile_yaml_gives_a_connection_or_a_refusal(text: str) -> None:
    """Aliases, merge keys, base-60 integers and huge scalars: a refusal or a connection, and
    the slowest parse is printed (a figure for benchmarks/README.md, not an assertion)."""
    started = time.perf_counter()
    result = parse(text)
    SLOWEST[0] = max(SLOWEST[0], time.perf_counter() - started)
    assert_well_formed(result)
    if "&l0" in text or "*l0" in text:
        assert isinstance(result, Refusal)
        assert "anchors or aliases" in result.message
    print(f"slowest hostile kubeconfig so far: {SLOWEST[0] * 1000:.1f} ms")


def test_yaml_extras_are_refused_or_read_as_text() -> None:
    sexagesimal = ":".join(["1"] * 30_000)
    read = parse(f"current-context: {sexagesimal}\ncontexts: [{{name: '{sexagesimal}'}}]")
    assert isinstance(read, Refusal)
    assert read.code == Code.UNKNOWN_CLUSTER  # the context was found: the value stayed text
    merged = parse("a: &a {k: v}\nb: {<<: *a}\ncurrent-context: x")
    assert isinstance(merged, Refusal)
    assert "anchors or aliases" in merged.message
    plain_merge = parse("b: {<<: {k: v}}\ncurrent-context: x")
    assert isinstance(plain_merge, Refusal)
    assert "merge key" in plain_merge.message
    quoted_key = parse("b: {'<<': {k: v}}\ncurrent-context: x")
    assert isinstance(quoted_key, Refusal)
    assert quoted_key.code == Code.UNKNOWN_CONTEXT  # a quoted << is just a key


def test_a_parse_stops_itself_at_its_cpu_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a worker thread a parse cannot be cancelled: it must end itself, whatever it reads."""
    assert PARSE_BUDGET == 2.0
    clock = iter(range(0, 10_000, 1))  # each look at the clock: one more second of CPU
    monkeypatch.setattr(time, "thread_time", lambda: float(next(clock)))
    result = parse("clusters: [" + ",".join(["1"] * 1000) + "]\ncurrent-context: x")
    assert result == TOO_COMPLEX


# --- repeated keys: refused wherever they are, at the repeat, in one pass -----------------------

OTHER_SERVER = "https://repeated.example:6443"


class Pairs(list[tuple[str, object]]):
    """A mapping as its pairs, so that a key can be written twice (a dict cannot hold that)."""


class _PairsDumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


_PairsDumper.add_representer(
    Pairs, lambda dumper, pairs: dumper.represent_mapping("tag:yaml.org,2002:map", list(pairs))
)


def as_pairs(value: object, target: object, key: str, after: int) -> object:
    """``value`` with every mapping as :class:`Pairs`, and in ``target`` ``key`` written again
    ``after`` pairs after its first place, with :data:`OTHER_SERVER` for its value."""
    if isinstance(value, list):
        return [as_pairs(item, target, key, after) for item in value]
    if not isinstance(value, dict):
        return value
    pairs = Pairs((k, as_pairs(v, target, key, after)) for k, v in value.items())
    if value is target:
        pairs.insert(list(value).index(key) + after, (key, OTHER_SERVER))
    return pairs


def as_json(value: object, indent: str = "") -> str:
    inner = indent + "  "
    if isinstance(value, Pairs):
        items = [f"{inner}{json.dumps(k)}: {as_json(v, inner)}" for k, v in value]
    elif isinstance(value, list):
        items = [inner + as_json(item, inner) for item in value]
    else:
        return json.dumps(value)
    brackets = "{}" if isinstance(value, Pairs) else "[]"
    if not items:
        return brackets
    return brackets[0] + "\n" + ",\n".join(items) + "\n" + indent + brackets[1]


def mappings(value: object) -> list[dict[str, Any]]:
    """Every mapping with a key in ``value``, outermost first."""
    found: list[dict[str, Any]] = []
    if isinstance(value, dict):
        if value:
            found.append(value)
        for item in value.values():
            found += mappings(item)
    elif isinstance(value, list):
        for item in value:
            found += mappings(item)
    return found


@given(s.valid_kubeconfigs(), st.sampled_from(["yaml", "json"]), st.data())
@settings(max_examples=s.examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_key_repeated_anywhere_is_refused_where_it_is_repeated(
    case: tuple[Document, Connection], style: str, data: st.DataObject
) -> None:
    """In the entries Kokumi reads and in those it ignores, in YAML and in JSON: the refusal
    names the key and the line and column of its second place, and nothing else of the text."""
    document, connection = case
    target = data.draw(st.sampled_from(mappings(document)), label="mapping")
    key = data.draw(st.sampled_from(sorted(target)), label="key")
    after = data.draw(st.integers(min_value=1, max_value=len(target)), label="after")
    written = as_pairs(document, target, key, after)
    text = (
        as_json(written)
        if style == "json"
        else yaml.dump(written, Dumper=_PairsDumper, sort_keys=False, width=1 << 20)
    )
    line = next(i for i, held in enumerate(text.splitlines(), 1) if OTHER_SERVER in held)
    spelled = json.dumps(key) if style == "json" else key
    column = text.splitlines()[line - 1].index(spelled) + 1
    result = parse(text)
    assert result == Refusal(Code.DUPLICATE_KEY.value, repeated(key, line, column))
    assert_well_formed(result, s.secrets_of(connection))


@pytest.mark.parametrize("style", ["yaml", "json"])
def test_many_keys_cost_one_look_each(style: str) -> None:
    """40,000 distinct keys read well inside the CPU budget, and a repeat after them is found:
    comparing each key with those before it would take 800 million steps, and TooComplex."""
    keys = {f"k{i}": 0 for i in range(40_000)}
    many = s.dump({**keys, "current-context": "x"}, style)
    assert parse(many) == ASKED_FOR_X
    if style == "json":
        again, line, column = many[:-2] + ',\n  "k7": 1\n}', 40_003, 3
    else:
        again, line, column = many + "k7: 1\n", 40_002, 1
    assert parse(again) == Refusal(Code.DUPLICATE_KEY.value, repeated(None, line, column))


ASKED_FOR_X = Refusal(
    "UnknownContext",
    'current context "x" is not in contexts (current-context): name one that is there, or add '
    "the context",
)
