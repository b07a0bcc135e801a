"""A Cluster's kubeconfig becomes a Connection, or a precise Refusal.

The kubeconfig comes from a Secret that anybody with write access to it controls, and the Connection
goes to the probe and into Argo CD's cluster Secret. So parsing is total: whatever the text holds,
``parse`` returns a value and never raises, and a refusal says in one line which entry and field is
wrong and how to fix it, without ever quoting a credential. Only the cluster and the user of the
current context are read, as kubectl would use them; other entries are ignored, whatever they hold,
except a key given twice in one mapping: that is refused anywhere, since readers of the same text
disagree on which value counts.

Everything Kokumi cannot carry over to Argo CD is refused rather than dropped: an exec plugin, an
auth provider, a file path or an extension that Kokumi silently ignored would give a connection that
works differently from the one the kubeconfig describes.
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Callable
from typing import Final, TypeVar
from urllib.parse import urlsplit

import attrs
import yaml

from kokumi.core.kubeconfig.certificates import certificate_authority, client_certificate
from kokumi.core.kubeconfig.connection import (
    FLATTEN,
    TOP,
    Body,
    Code,
    Connection,
    Entry,
    KubeconfigRefused,
    Owner,
    Refusal,
    Refused,
    present,
    refuse,
    string,
    wrong_type,
)
from kokumi.core.kubeconfig.events import PARSE_BUDGET, load, too_complex
from kokumi.core.text import b64, quoted, type_name

__all__ = ["ContextVerdicts", "examine", "minimise", "parse", "read_contexts", "render"]


def parse(text: str | bytes, *, context: str | None = None) -> Connection | Refusal:
    """Read the connection of the current context (or of ``context``) from a kubeconfig.

    Total on purpose: the caller is an actor that must never die of a malformed Secret, so even a
    bug here becomes a Refusal with code ``InternalError`` rather than an exception.
    """
    try:
        return _read(load(text), context)[1]
    except Refused as refused:
        return refused.refusal
    except Exception as error:
        return _internal(error)


def _internal(error: Exception) -> Refusal:
    # Only the exception's type: its text could quote the kubeconfig.
    return Refusal(
        Code.INTERNAL_ERROR.value,
        f"Kokumi failed to read the kubeconfig ({type(error).__name__}), which is a bug in "
        "Kokumi, not in the kubeconfig: report it with Kokumi's version",
    )


def examine(
    text: str | bytes, context: str | None = None
) -> tuple[tuple[str, ...], tuple[str, str] | Refusal]:
    """The names of the kubeconfig's contexts, and (what :func:`minimise` keeps, its server) or
    why the context cannot be used: from one read.

    For a form that offers the names beside a refusal. Its text is anybody's, so it is read by
    this reader only (its size limit, CPU budget, no aliases), never by a general YAML loader,
    and only once. Total, as :func:`parse` is: the names are () when none can be read.
    """
    try:
        document = load(text)
    except Refused as refused:
        return (), refused.refusal
    except Exception as error:
        return (), _internal(error)
    names = _context_names(document)
    try:
        (context_name, cluster_name, user_name), connection = _read(document, context)
    except Refused as refused:
        return names, refused.refusal
    except Exception as error:
        return names, _internal(error)
    minimal = render(connection, context=context_name, cluster=cluster_name, user=user_name)
    return names, (minimal, connection.server)


@attrs.frozen
class ContextVerdicts:
    """Each context of one kubeconfig with what :func:`parse` would say of it, from one read."""

    #: The first ``limit`` context names in order, each with its Connection or Refusal.
    verdicts: tuple[tuple[str, Connection | Refusal], ...] = attrs.field(repr=False)
    #: How many distinct context names the kubeconfig has: more than ``verdicts`` when cut.
    total: int = 0
    #: Why no context can be read: the document cannot be, or it names none (what ``parse``
    #: says of the current context then). None when ``total`` is above 0.
    refusal: Refusal | None = None


def read_contexts(text: str | bytes, limit: int | None = None) -> ContextVerdicts:
    """Each context's verdict, the first ``limit`` by name, as ``parse(text, context=name)``
    would give it, from one read of the document.

    A source that turns every context into a Cluster read the whole text once per context:
    CPU grew with the square of the contexts (2,000 in 93 KiB took a minute). Here the document
    is loaded once, the entries are looked up by name, and each cluster and user is checked once
    however many contexts name it; ``limit`` bounds the contexts judged. Total, as ``parse``.
    """
    started = time.thread_time()
    try:
        document = load(text)
    except Refused as refused:
        return ContextVerdicts((), 0, refused.refusal)
    except Exception as error:
        return ContextVerdicts((), 0, _internal(error))
    names = _context_names(document)
    if not names:
        try:
            _read(document, None)
        except Refused as refused:
            return ContextVerdicts((), 0, refused.refusal)
        except Exception as error:
            return ContextVerdicts((), 0, _internal(error))
        return ContextVerdicts((), 0, None)  # unreachable: a context read is a context named
    lookup = _Lookup()
    verdicts: list[tuple[str, Connection | Refusal]] = []
    for name in names[:limit]:
        if time.thread_time() - started > PARSE_BUDGET:
            # One budget for the whole text, its contexts' certificates and keys included.
            try:
                too_complex()
            except Refused as refused:
                return ContextVerdicts((), 0, refused.refusal)
        verdict: Connection | Refusal
        try:
            verdict = _read(document, name, lookup)[1]
        except Refused as refused:
            verdict = refused.refusal
        except Exception as error:
            verdict = _internal(error)
        verdicts.append((name, verdict))
    return ContextVerdicts(tuple(verdicts), len(names))


def _context_names(document: object) -> tuple[str, ...]:
    """The distinct names of the document's contexts, sorted: () when none can be read."""
    if isinstance(document, dict) and isinstance(document.get("contexts"), list):
        entries: list[object] = document["contexts"]
        named = (e.get("name") for e in entries if isinstance(e, dict))
        return tuple(sorted({n for n in named if isinstance(n, str)}))
    return ()


def minimise(text: str | bytes, context: str | None = None) -> str:
    """A self-contained kubeconfig of one context, its cluster and its user, and nothing else.

    It is written from the parsed Connection, so it holds exactly what Kokumi would use and
    ``parse`` accepts it; the context's namespace and any field Kokumi ignores are left out.
    Raises :class:`KubeconfigRefused` when the context cannot be used.
    """
    try:
        (context_name, cluster_name, user_name), connection = _read(load(text), context)
    except Refused as refused:
        raise KubeconfigRefused(refused.refusal) from None
    return render(connection, context=context_name, cluster=cluster_name, user=user_name)


def render(
    connection: Connection,
    *,
    context: str = "default",
    cluster: str = "default",
    user: str = "default",
) -> str:
    """The self-contained kubeconfig of ``connection``: one context, its cluster and its user.

    The one writer of kubeconfigs, so that one built from a server, a CA and a token (by the CLI,
    or from an Argo CD cluster Secret) has the same shape as one :func:`minimise` keeps.
    """
    cluster_body: dict[str, object] = {"server": connection.server}
    if connection.certificate_authority is not None:
        cluster_body["certificate-authority-data"] = b64(connection.certificate_authority)
    if connection.tls_server_name is not None:
        cluster_body["tls-server-name"] = connection.tls_server_name
    if connection.insecure_skip_tls_verify:
        cluster_body["insecure-skip-tls-verify"] = True
    if connection.proxy_url is not None:
        cluster_body["proxy-url"] = connection.proxy_url
    user_body: dict[str, object] = {}
    if connection.token is not None:
        user_body["token"] = connection.token
    if connection.client_certificate is not None:
        user_body["client-certificate-data"] = b64(connection.client_certificate)
    if connection.client_key is not None:
        user_body["client-key-data"] = b64(connection.client_key)
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": cluster_body}],
        "contexts": [{"name": context, "context": {"cluster": cluster, "user": user}}],
        "current-context": context,
        "users": [{"name": user, "user": user_body}],
    }
    return yaml.dump(
        document,
        Dumper=yaml.SafeDumper,  # libyaml fails on a name with a lone surrogate
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=False,  # else a name with U+2028 comes back folded
        width=1 << 30,  # never fold a long token or base64 value
    )


_KUBECONFIG_FIELDS: Final = ("clusters", "contexts", "users", "current-context")

_IMPERSONATION: Final = ("as", "as-uid", "as-groups", "as-user-extra")

_INLINE: Final = "use a ServiceAccount token or a client certificate inline"


_T = TypeVar("_T")


class _Lookup:
    """One document's entries by name, and each cluster's and user's checks once made: for
    reading many of its contexts, where a scan of the lists and a parse of the certificates per
    context made the cost grow with the square of the contexts."""

    def __init__(self) -> None:
        self._by_name: dict[str, dict[str, list[Body]]] = {}
        self._checked: dict[tuple[str, str, str], object] = {}

    def named(self, plural: str, entries: list[object]) -> dict[str, list[Body]]:
        """The entries of ``plural`` by name; built once, since the list is the document's."""
        index = self._by_name.get(plural)
        if index is None:
            index = {}
            for entry in entries:
                if isinstance(entry, dict):
                    name = entry.get("name")
                    if isinstance(name, str):  # the names looked for are strings
                        index.setdefault(name, []).append(entry)
            self._by_name[plural] = index
        return index

    def once(self, what: str, owner: Entry, check: Callable[[], _T]) -> _T:
        """``check()``'s value or refusal for ``owner``, made the first time only."""
        key = (what, owner.kind, owner.name)
        if key not in self._checked:
            try:
                self._checked[key] = check()
            except Refused as refused:
                self._checked[key] = refused
        found = self._checked[key]
        if isinstance(found, Refused):
            raise Refused(found.refusal)
        return found  # type: ignore[return-value] # stored by this method for this key


def _once(lookup: _Lookup | None, what: str, owner: Entry, check: Callable[[], _T]) -> _T:
    return check() if lookup is None else lookup.once(what, owner, check)


def _read(
    document: object, context: str | None, lookup: _Lookup | None = None
) -> tuple[tuple[str, str, str], Connection]:
    """The names of the context, cluster and user used, and their Connection.

    ``lookup`` (for many contexts of one document) keeps what was found and checked for the
    next context; the verdict is the same as without it."""
    if not isinstance(document, dict):
        if isinstance(document, str):
            _not_a_kubeconfig(document)
        refuse(
            Code.NOT_KUBECONFIG,
            f"the kubeconfig is {type_name(document, 'yaml')}, not a mapping: store a kubeconfig, "
            "with clusters, contexts, users and current-context",
        )
    kind = document.get("kind")
    if kind is not None and kind != "Config":
        refuse(
            Code.NOT_KUBECONFIG,
            "the document's kind is not Config (kind): store a kubeconfig, not another object",
        )
    api_version = document.get("apiVersion")
    if api_version is not None and api_version != "v1":
        refuse(
            Code.NOT_KUBECONFIG, "the kubeconfig's apiVersion is not v1 (apiVersion): set it to v1"
        )
    if not any(field in document for field in _KUBECONFIG_FIELDS):
        refuse(
            Code.NOT_KUBECONFIG,
            "the document has none of a kubeconfig's fields (clusters, contexts, users, "
            "current-context): store a kubeconfig",
        )
    _no_extensions(document, TOP, "extensions")
    preferences = document.get("preferences")
    if isinstance(preferences, dict):
        _no_extensions(preferences, TOP, "preferences.extensions")

    if context is None:
        current = string(document, "current-context", TOP)
        if current is None:
            refuse(
                Code.NO_CURRENT_CONTEXT,
                "the kubeconfig has no current context (current-context): set it to the context "
                "Kokumi should use, e.g. with kubectl config use-context",
            )
        context = current
        missing = (
            f"current context {quoted(context)} is not in contexts (current-context): name one "
            "that is there, or add the context"
        )
    else:
        missing = (
            f"context {quoted(context)} is not in contexts (contexts[].name): name one that is "
            "there"
        )
    ctx = Entry("context", context)
    context_body = _body(_find(document, ctx, Code.UNKNOWN_CONTEXT, missing, lookup), ctx)
    _no_extensions(context_body, ctx, ctx.path("extensions"))

    cluster_name = string(context_body, "cluster", ctx)
    if cluster_name is None:
        refuse(
            Code.UNKNOWN_CLUSTER,
            f"{ctx} names no cluster ({ctx.path('cluster')}): set it to the name of an entry "
            "of clusters",
        )
    user_name = string(context_body, "user", ctx)
    if user_name is None:
        refuse(
            Code.UNKNOWN_USER,
            f"{ctx} names no user ({ctx.path('user')}): set it to the name of an entry of users",
        )
    cluster_owner = Entry("cluster", cluster_name)
    missing = (
        f"{ctx} names {cluster_owner}, which is not in clusters ({ctx.path('cluster')}): add the "
        "cluster or name one that is there"
    )
    cluster = _body(
        _find(document, cluster_owner, Code.UNKNOWN_CLUSTER, missing, lookup), cluster_owner
    )
    user_owner = Entry("user", user_name)
    missing = (
        f"{ctx} names {user_owner}, which is not in users ({ctx.path('user')}): add the user or "
        "name one that is there"
    )
    user = _body(_find(document, user_owner, Code.UNKNOWN_USER, missing, lookup), user_owner)

    connection = _connection(cluster, cluster_owner, user, user_owner, lookup)
    return (context, cluster_name, user_name), connection


def _find(
    document: Body, owner: Entry, code: Code, missing: str, lookup: _Lookup | None = None
) -> Body:
    """The one entry of that name; the others may hold anything, since kubectl ignores them too."""
    plural = f"{owner.kind}s"
    entries = document.get(plural)
    if entries is None:
        entries = []
    if not isinstance(entries, list):
        wrong_type(TOP, plural, plural, entries, "list")
    if lookup is not None:
        found = lookup.named(plural, entries).get(owner.name, [])
    else:
        found = [e for e in entries if isinstance(e, dict) and e.get("name") == owner.name]
    if not found:
        refuse(code, missing)
    if len(found) > 1:
        # client-go refuses the whole kubeconfig then; which entry was meant is anybody's guess.
        refuse(
            Code.DUPLICATE_NAME,
            f"{owner} appears {len(found)} times in {plural} ({plural}[].name): keep one",
        )
    return found[0]


def _body(entry: Body, owner: Entry) -> Body:
    body = entry.get(owner.kind)
    if body is None:
        return {}  # as in client-go: an entry without a body is an empty one
    if not isinstance(body, dict):
        wrong_type(owner, owner.kind, owner.path(), body, "mapping")
    return body


def _refuse_user_mechanisms(user: Body, owner: Entry) -> None:
    if present(user.get("exec")):
        refuse(
            Code.EXEC_PLUGIN,
            f"{owner} uses an exec plugin ({owner.path('exec')}), which Kokumi does not run: "
            f"{_INLINE}",
        )
    if present(user.get("auth-provider")):
        refuse(
            Code.AUTH_PROVIDER,
            f"{owner} uses an auth provider ({owner.path('auth-provider')}), which Kokumi does not "
            f"run: {_INLINE}",
        )
    basic = [field for field in ("username", "password") if present(user.get(field))]
    if basic:
        refuse(
            Code.BASIC_AUTH,
            f"{owner} uses basic authentication ({owner.path(', '.join(basic))}), which "
            f"Kubernetes does not offer: {_INLINE}",
        )
    if present(user.get("client-certificate")):
        refuse(
            Code.FILE_PATH,
            f"{owner} reads its client certificate from a file "
            f"({owner.path('client-certificate')}), which Kokumi cannot read: embed it as "
            f"client-certificate-data, {FLATTEN}",
        )
    if present(user.get("client-key")):
        refuse(
            Code.FILE_PATH,
            f"{owner} reads its client key from a file ({owner.path('client-key')}), which "
            f"Kokumi cannot read: embed it as client-key-data, {FLATTEN}",
        )
    if present(user.get("tokenFile")):
        refuse(
            Code.FILE_PATH,
            f"{owner} reads its token from a file ({owner.path('tokenFile')}), which Kokumi cannot "
            "read: put the token itself into token",
        )
    impersonation = [field for field in _IMPERSONATION if present(user.get(field))]
    if impersonation:
        # Argo CD would connect as the user itself, with rights the kubeconfig did not mean to use.
        refuse(
            Code.IMPERSONATION,
            f"{owner} impersonates another identity ({owner.path(impersonation[0])}), which "
            "Kokumi does not do: use a credential of the identity Kokumi should act as",
        )
    _no_extensions(user, owner, owner.path("extensions"))


def _refuse_cluster_mechanisms(cluster: Body, owner: Entry) -> None:
    if present(cluster.get("certificate-authority")):
        refuse(
            Code.FILE_PATH,
            f"{owner} reads its CA from a file ({owner.path('certificate-authority')}), which "
            f"Kokumi cannot read: embed it as certificate-authority-data, {FLATTEN}",
        )
    _no_extensions(cluster, owner, owner.path("extensions"))


def _no_extensions(body: Body, owner: Owner, path: str) -> None:
    if present(body.get("extensions")):
        # What an extension configures (a proxy, a plugin's settings) would silently be lost.
        refuse(
            Code.EXTENSION,
            f"{owner} has extensions ({path}), which Kokumi does not apply: remove them",
        )


def _connection(
    cluster: Body,
    cluster_owner: Entry,
    user: Body,
    user_owner: Entry,
    lookup: _Lookup | None = None,
) -> Connection:
    # In this order, so that the first refusal is the same whichever way the context is read.
    _once(lookup, "mechanisms", user_owner, lambda: _refuse_user_mechanisms(user, user_owner))
    reached = _once(lookup, "cluster", cluster_owner, lambda: _cluster(cluster, cluster_owner))
    token, certificate, key = _once(lookup, "user", user_owner, lambda: _user(user, user_owner))
    return attrs.evolve(reached, token=token, client_certificate=certificate, client_key=key)


def _cluster(cluster: Body, cluster_owner: Entry) -> Connection:
    """The cluster's half of the Connection (no credential), or its refusal."""
    _refuse_cluster_mechanisms(cluster, cluster_owner)
    server = string(cluster, "server", cluster_owner)
    if server is None:
        refuse(
            Code.NO_SERVER,
            f"{cluster_owner} has no server ({cluster_owner.path('server')}): set it to the API "
            "server's URL as Kokumi's cluster reaches it, e.g. https://spoke.example:6443",
        )
    _check_server(server, cluster_owner)

    proxy_url = string(cluster, "proxy-url", cluster_owner)
    if proxy_url is not None and _url_problem(proxy_url, _PROXY_SCHEMES) not in (None, "userinfo"):
        refuse(
            Code.INVALID_PROXY_URL,
            f"{cluster_owner} has a proxy-url that is not an http, https or socks5 URL "
            f"({cluster_owner.path('proxy-url')}): write it as http://proxy.example:3128",
        )
    tls_server_name = string(cluster, "tls-server-name", cluster_owner)
    if tls_server_name is not None and (
        not _SERVER_NAME.fullmatch(tls_server_name) or _tls_refuses(tls_server_name)
    ):
        refuse(
            Code.INVALID_TLS_SERVER_NAME,
            f"{cluster_owner} has a tls-server-name that is not a host name "
            f"({cluster_owner.path('tls-server-name')}): set it to a name in the API server's "
            "certificate",
        )
    insecure = cluster.get("insecure-skip-tls-verify")
    if insecure is None:
        insecure = False
    if not isinstance(insecure, bool):
        wrong_type(
            cluster_owner,
            "insecure-skip-tls-verify",
            cluster_owner.path("insecure-skip-tls-verify"),
            insecure,
            "boolean",
        )
    ca_data = string(cluster, "certificate-authority-data", cluster_owner)
    if insecure and ca_data is not None:
        refuse(
            Code.INSECURE_WITH_CA,
            f"{cluster_owner} has both certificate-authority-data and insecure-skip-tls-verify "
            f"({cluster_owner.path('insecure-skip-tls-verify')}), which kubectl refuses too: keep "
            "the CA and remove insecure-skip-tls-verify",
        )
    authority = None if ca_data is None else certificate_authority(ca_data, cluster_owner)
    return Connection(
        server=server,
        certificate_authority=authority,
        tls_server_name=tls_server_name,
        insecure_skip_tls_verify=insecure,
        proxy_url=proxy_url,
    )


def _user(user: Body, user_owner: Entry) -> tuple[str | None, bytes | None, bytes | None]:
    """The user's credential: its token, client certificate and key, or its refusal."""
    token = string(user, "token", user_owner)
    certificate_data = string(user, "client-certificate-data", user_owner)
    key_data = string(user, "client-key-data", user_owner)
    if token is None and certificate_data is None and key_data is None:
        refuse(
            Code.NO_CREDENTIAL,
            f"{user_owner} has no credential ({user_owner.path()}): add a token, or "
            "client-certificate-data and client-key-data",
        )
    if token is not None:
        _check_token(token, user_owner)
    certificate, key = client_certificate(certificate_data, key_data, user_owner)
    return token, certificate, key


_SERVER_SCHEMES: Final = frozenset({"http", "https"})

_PROXY_SCHEMES: Final = frozenset({"http", "https", "socks5"})  # what Argo CD accepts

_VISIBLE_ASCII: Final = re.compile(r"[\x21-\x7e]+")

_SERVER_NAME: Final = re.compile(r"[A-Za-z0-9*_:.\-]{1,253}")


def _tls_refuses(host: str) -> bool:
    """Whether TLS would refuse ``host`` as a server name: Python's ``ssl`` encodes it with the
    IDNA codec, which raises for an empty label (``a..b``, ``.example``) or one over 63
    characters, and the check would end in an exception instead of a Reason."""
    if ":" in host:
        return False  # an IPv6 address
    try:
        host.encode("idna")
    except UnicodeError:
        return True
    return False


def _url_problem(url: str, schemes: frozenset[str]) -> str | None:
    """None for a usable absolute URL, else what is wrong with it (never the URL itself)."""
    if not _VISIBLE_ASCII.fullmatch(url):
        return "url"  # urlsplit would silently drop tabs and newlines
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises for a port that is no number or out of range
        hostname = parts.hostname
    except ValueError:
        return "url"
    if parts.scheme not in schemes or not hostname:
        return "url"
    if parts.username is not None or parts.password is not None:
        return "userinfo"
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        return "query"
    if _tls_refuses(hostname):
        return "host"
    return None


def _check_server(server: str, owner: Entry) -> None:
    path = owner.path("server")
    problem = _url_problem(server, _SERVER_SCHEMES)
    if problem == "url":
        refuse(
            Code.INVALID_SERVER,
            f"{owner} has a server that is not an absolute http or https URL ({path}): write it "
            "as https://host:port",
        )
    if problem == "userinfo":
        refuse(
            Code.INVALID_SERVER,
            f"{owner} has a user name or password in its server URL ({path}): remove them and "
            "put the credential into the user",
        )
    if problem == "query":
        refuse(
            Code.INVALID_SERVER,
            f"{owner} has a query or fragment in its server URL ({path}): write it as "
            "https://host:port, with a path only if the API server is served under one",
        )
    if problem == "host":
        refuse(
            Code.INVALID_SERVER,
            f"{owner} has a server whose host name has an empty label or one over 63 characters "
            f"({path}): write the API server's DNS name or address",
        )


def _check_token(token: str, owner: Entry) -> None:
    if _VISIBLE_ASCII.fullmatch(token):
        return
    path = owner.path("token")
    if any(character.isspace() for character in token):
        refuse(
            Code.INVALID_TOKEN,
            f"{owner} has whitespace in its token ({path}): copy the token without spaces or "
            "line breaks",
        )
    refuse(
        Code.INVALID_TOKEN,
        f"{owner} has characters in its token that cannot go into an HTTP header ({path}): copy "
        "the token as its Secret holds it, decoded from base64",
    )


_PEM_BEGIN: Final = re.compile(r"-----BEGIN ([A-Z0-9 ]{1,40})-----")


def _not_a_kubeconfig(text: str) -> None:
    """Name what a text stored instead of a kubeconfig, where it is a common mistake: a PEM
    certificate or key (the file beside the kubeconfig), or the kubeconfig base64-encoded once
    more (Secret ``data`` is base64 already). Only the PEM block's type is quoted, never data."""
    pem = _PEM_BEGIN.search(text)
    if pem is not None:
        label = pem.group(1)
        if label.endswith("PRIVATE KEY"):
            refuse(
                Code.NOT_KUBECONFIG,
                f"the kubeconfig is a PEM private key ({label}), not a kubeconfig: store the "
                "kubeconfig; a client key belongs in its user's client-key-data",
            )
        if label.endswith("CERTIFICATE"):
            refuse(
                Code.NOT_KUBECONFIG,
                f"the kubeconfig is a PEM certificate ({label}), not a kubeconfig: store the "
                "kubeconfig; a CA certificate belongs in its cluster's certificate-authority-data",
            )
        refuse(
            Code.NOT_KUBECONFIG,
            f"the kubeconfig is a PEM block ({label}), not a kubeconfig: store the kubeconfig",
        )
    compact = "".join(text.split())
    if len(compact) >= 16:
        try:
            decoded = base64.b64decode(compact, validate=True)
        except ValueError:
            decoded = b""
        if any(field.encode() in decoded for field in (*_KUBECONFIG_FIELDS, "apiVersion")):
            refuse(
                Code.NOT_KUBECONFIG,
                "the kubeconfig is base64-encoded once more than it should be: store the "
                "kubeconfig's text (the Secret's data is base64 of it, nothing more)",
            )
