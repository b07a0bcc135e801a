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
works differently from the one the kubeconfig describes. This module walks the document to the
context, its cluster and its user; what one cluster or user entry may hold is
:mod:`kokumi.core.kubeconfig.entries`.
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Callable
from typing import Final, TypeVar

import attrs
import yaml

from kokumi.core.kubeconfig.connection import (
    TOP,
    Body,
    Code,
    Connection,
    Entry,
    KubeconfigRefused,
    Refusal,
    Refused,
    refuse,
    string,
    wrong_type,
)
from kokumi.core.kubeconfig.entries import (
    cluster_connection,
    no_extensions,
    refuse_user_mechanisms,
    user_credential,
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
    no_extensions(document, TOP, "extensions")
    preferences = document.get("preferences")
    if isinstance(preferences, dict):
        no_extensions(preferences, TOP, "preferences.extensions")

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
    no_extensions(context_body, ctx, ctx.path("extensions"))

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


def _connection(
    cluster: Body,
    cluster_owner: Entry,
    user: Body,
    user_owner: Entry,
    lookup: _Lookup | None = None,
) -> Connection:
    # In this order, so that the first refusal is the same whichever way the context is read.
    _once(lookup, "mechanisms", user_owner, lambda: refuse_user_mechanisms(user, user_owner))
    reached = _once(
        lookup, "cluster", cluster_owner, lambda: cluster_connection(cluster, cluster_owner)
    )
    token, certificate, key = _once(
        lookup, "user", user_owner, lambda: user_credential(user, user_owner)
    )
    return attrs.evolve(reached, token=token, client_certificate=certificate, client_key=key)


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
