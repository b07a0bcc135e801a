"""What a kubeconfig becomes: a Connection, or a Refusal with its code and one-line message.

The probe, Argo CD's Secret and the status all hold a Connection or a Refusal without reading a
kubeconfig, so the shapes sit here, below the reader; so do the few helpers every part of the
reader refuses with, which name an entry and its field the way every message does.
"""

from __future__ import annotations

import enum
from typing import Final, NoReturn
from urllib.parse import urlsplit, urlunsplit

import attrs

from kokumi.core.reasons import Reason
from kokumi.core.text import quoted, type_name

__all__ = [
    "FLATTEN",
    "MAX_SIZE",
    "REASON",
    "TOP",
    "Body",
    "Code",
    "Connection",
    "Entry",
    "KubeconfigRefused",
    "Owner",
    "Refusal",
    "Refused",
    "present",
    "refuse",
    "string",
    "wrong_type",
]

REASON: Final = Reason.INVALID_KUBECONFIG
"""The Reason of a Cluster's Ready condition for every refusal; the message tells them apart."""

MAX_SIZE: Final = 1024 * 1024
"""A Secret holds at most 1 MiB; nothing larger is a kubeconfig, and YAML time grows with size."""


class Code(enum.StrEnum):
    """Fine-grained reasons for a refusal, listed with their messages in docs/reasons.md.

    A status shows :data:`REASON` and the message; the code is for logs, metrics and tests, which
    need to tell refusals apart without matching message text.
    """

    TOO_LARGE = "TooLarge"
    TOO_COMPLEX = "TooComplex"
    NOT_YAML = "NotYAML"
    EMPTY = "Empty"
    NOT_KUBECONFIG = "NotKubeconfig"
    WRONG_TYPE = "WrongType"
    EXTENSION = "Extension"
    NO_CURRENT_CONTEXT = "NoCurrentContext"
    UNKNOWN_CONTEXT = "UnknownContext"
    UNKNOWN_CLUSTER = "UnknownCluster"
    UNKNOWN_USER = "UnknownUser"
    DUPLICATE_NAME = "DuplicateName"
    DUPLICATE_KEY = "DuplicateKey"
    EXEC_PLUGIN = "ExecPlugin"
    AUTH_PROVIDER = "AuthProvider"
    BASIC_AUTH = "BasicAuth"
    FILE_PATH = "FilePath"
    IMPERSONATION = "Impersonation"
    NO_SERVER = "NoServer"
    INVALID_SERVER = "InvalidServer"
    INVALID_PROXY_URL = "InvalidProxyURL"
    INVALID_TLS_SERVER_NAME = "InvalidTLSServerName"
    INSECURE_WITH_CA = "InsecureWithCA"
    INVALID_CERTIFICATE_AUTHORITY = "InvalidCertificateAuthority"
    NO_CREDENTIAL = "NoCredential"
    INVALID_TOKEN = "InvalidToken"  # noqa: S105 (a reason, not a password)
    INCOMPLETE_CLIENT_CERTIFICATE = "IncompleteClientCertificate"
    INVALID_CLIENT_CERTIFICATE = "InvalidClientCertificate"
    INVALID_CLIENT_KEY = "InvalidClientKey"
    CLIENT_KEY_MISMATCH = "ClientKeyMismatch"
    INTERNAL_ERROR = "InternalError"


def _without_userinfo(url: str | None) -> str:
    if url is None:
        return "None"
    try:
        parts = urlsplit(url)
    except ValueError:
        return "'<unparsable URL>'"
    if "@" in parts.netloc:
        parts = parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1])
    return repr(urlunsplit(parts))


@attrs.frozen
class Connection:
    """Everything needed to reach one cluster, copied from the current context of a kubeconfig.

    Secret fields are left out of ``repr`` so that a Connection in a log line or a traceback never
    shows a credential.
    """

    server: str
    token: str | None = attrs.field(default=None, repr=False)
    client_certificate: bytes | None = attrs.field(default=None, repr=False)  # PEM
    client_key: bytes | None = attrs.field(default=None, repr=False)  # PEM
    certificate_authority: bytes | None = None  # PEM bundle
    tls_server_name: str | None = None
    insecure_skip_tls_verify: bool = False
    # A proxy URL may carry a user and password; repr shows the host only.
    proxy_url: str | None = attrs.field(default=None, repr=_without_userinfo)


@attrs.frozen
class Refusal:
    """Why a kubeconfig is refused: a fine-grained ``code``, a one-line ``message`` with the fix."""

    code: str
    message: str

    @property
    def reason(self) -> Reason:
        """Users look for one Reason in ``kubectl get``; the message carries the detail."""
        return REASON


class KubeconfigRefused(ValueError):
    """Raised by :func:`minimise`, whose callers (the CLI) want an error, not a value to check."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


class Refused(Exception):
    """Carries a Refusal out of deep checks. Shared with the reader, which catches it, and the
    modules it raises from; the reader's entry points turn it into a Refusal, so it never leaves
    the package."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.code)
        self.refusal = refusal


def refuse(code: Code, message: str) -> NoReturn:
    """How every part of the reader (events, certificates, the walk) refuses: one exception, so
    one place catches them all."""
    raise Refused(Refusal(code.value, message))


Body = dict[object, object]
"""A mapping of the document as read: shared by the reader's walk and its field helpers here."""


@attrs.frozen
class Entry:
    """One named entry of a list, as messages name it: ``user "kokumi"`` and ``users[].user``.

    Shared with the reader and the certificates, whose messages name entries the same way."""

    kind: str  # context, cluster, user
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {quoted(self.name)}"

    def path(self, field: str | None = None) -> str:
        base = f"{self.kind}s[].{self.kind}"
        return f"{base}.{field}" if field else base


class _Top:
    """The document itself, as messages name it."""

    def __str__(self) -> str:
        return "the kubeconfig"

    def path(self, field: str | None = None) -> str:
        return field or ""


TOP: Final = _Top()
"""The document as the owner of its top-level fields, for the reader's messages."""

Owner = Entry | _Top
"""Whatever holds a field a message names: an entry or the document."""

FLATTEN: Final = "e.g. with kubectl config view --minify --flatten"
"""The fix for a kubeconfig that points at files, quoted by the reader and the event reader."""


def present(value: object) -> bool:
    """Set to something: kubectl treats null, "" and empty lists or mappings as absent. Here
    beside :func:`string` so the reader's walk reads every field through one set of helpers."""
    if value is None:
        return False
    return not (isinstance(value, str | list | dict) and len(value) == 0)


def string(body: Body, key: str, owner: Owner) -> str | None:
    """``body[key]`` as a string, or None when absent or empty; refused when another type, in
    the words every field of the reader uses."""
    value = body.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        wrong_type(owner, key, owner.path(key), value, "string")
    return value


_FIXES: Final = {
    "string": "quote the value",
    "boolean": "write true or false, without quotes",
    "list": "write it as a list",
    "mapping": "write it as a mapping",
}


def wrong_type(owner: Owner, key: str, path: str, value: object, expected: str) -> NoReturn:
    """One message for a field of the wrong type, wherever the reader meets it."""
    refuse(
        Code.WRONG_TYPE,
        f"{owner} has {key} as {type_name(value, 'yaml')}, not a {expected} ({path}): "
        f"{_FIXES[expected]}",
    )
