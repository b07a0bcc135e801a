"""One cluster entry and one user entry of a kubeconfig, each judged on its own.

The reader (:mod:`kokumi.core.kubeconfig.reader`) walks the document to the context's cluster and
user; what those two entries may hold is decided here: the server, proxy and TLS fields of a
cluster, the credential of a user, and every mechanism Kokumi cannot carry over to Argo CD (an
exec plugin, an auth provider, a file path, impersonation, an extension), refused rather than
dropped. Apart because these are the rules a kubeconfig's author meets most, and they read one
entry at a time, without the document, its names or the many-contexts lookup around them.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import urlsplit

from kokumi.core.kubeconfig.certificates import certificate_authority, client_certificate
from kokumi.core.kubeconfig.connection import (
    FLATTEN,
    Body,
    Code,
    Connection,
    Entry,
    Owner,
    present,
    refuse,
    string,
    wrong_type,
)

__all__ = [
    "cluster_connection",
    "no_extensions",
    "refuse_cluster_mechanisms",
    "refuse_user_mechanisms",
    "user_credential",
]

_IMPERSONATION: Final = ("as", "as-uid", "as-groups", "as-user-extra")

_INLINE: Final = "use a ServiceAccount token or a client certificate inline"


def refuse_user_mechanisms(user: Body, owner: Entry) -> None:
    """Refuse a user that authenticates in a way Argo CD's cluster Secret cannot carry: the
    connection would work differently there from the one the kubeconfig describes. Apart from
    :func:`user_credential`, since the reader makes this check first, for any context."""
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
    no_extensions(user, owner, owner.path("extensions"))


def refuse_cluster_mechanisms(cluster: Body, owner: Entry) -> None:
    """Refuse a cluster that reads its CA from a file or has extensions: neither reaches Argo CD."""
    if present(cluster.get("certificate-authority")):
        refuse(
            Code.FILE_PATH,
            f"{owner} reads its CA from a file ({owner.path('certificate-authority')}), which "
            f"Kokumi cannot read: embed it as certificate-authority-data, {FLATTEN}",
        )
    no_extensions(cluster, owner, owner.path("extensions"))


def no_extensions(body: Body, owner: Owner, path: str) -> None:
    """Refuse extensions at ``path``; public since the reader refuses them at the top and in a
    context too, with the same message."""
    if present(body.get("extensions")):
        # What an extension configures (a proxy, a plugin's settings) would silently be lost.
        refuse(
            Code.EXTENSION,
            f"{owner} has extensions ({path}), which Kokumi does not apply: remove them",
        )


def cluster_connection(cluster: Body, cluster_owner: Entry) -> Connection:
    """The cluster's half of the Connection (no credential), or its refusal."""
    refuse_cluster_mechanisms(cluster, cluster_owner)
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


def user_credential(user: Body, user_owner: Entry) -> tuple[str | None, bytes | None, bytes | None]:
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
