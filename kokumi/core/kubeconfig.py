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
import binascii
import enum
import json
import re
import time
from typing import Final, NoReturn
from urllib.parse import urlsplit, urlunsplit

import attrs
import yaml
from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa

from kokumi.core.reasons import Reason
from kokumi.core.text import b64, quoted, type_name

__all__ = [
    "Code",
    "Connection",
    "KubeconfigRefused",
    "MAX_SIZE",
    "REASON",
    "Refusal",
    "examine",
    "minimise",
    "parse",
    "render",
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


def parse(text: str | bytes, *, context: str | None = None) -> Connection | Refusal:
    """Read the connection of the current context (or of ``context``) from a kubeconfig.

    Total on purpose: the caller is an actor that must never die of a malformed Secret, so even a
    bug here becomes a Refusal with code ``InternalError`` rather than an exception.
    """
    try:
        return _read(_load(text), context)[1]
    except _Refused as refused:
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
        document = _load(text)
    except _Refused as refused:
        return (), refused.refusal
    except Exception as error:
        return (), _internal(error)
    names: tuple[str, ...] = ()
    if isinstance(document, dict) and isinstance(document.get("contexts"), list):
        entries: list[object] = document["contexts"]
        named = (e.get("name") for e in entries if isinstance(e, dict))
        names = tuple(sorted({n for n in named if isinstance(n, str)}))
    try:
        (context_name, cluster_name, user_name), connection = _read(document, context)
    except _Refused as refused:
        return names, refused.refusal
    except Exception as error:
        return names, _internal(error)
    minimal = render(connection, context=context_name, cluster=cluster_name, user=user_name)
    return names, (minimal, connection.server)


def minimise(text: str | bytes, context: str | None = None) -> str:
    """A self-contained kubeconfig of one context, its cluster and its user, and nothing else.

    It is written from the parsed Connection, so it holds exactly what Kokumi would use and
    ``parse`` accepts it; the context's namespace and any field Kokumi ignores are left out.
    Raises :class:`KubeconfigRefused` when the context cannot be used.
    """
    try:
        (context_name, cluster_name, user_name), connection = _read(_load(text), context)
    except _Refused as refused:
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


# --- loading ------------------------------------------------------------------------------------

_Loader: Final = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# Only its parser is used (libyaml's is ten times faster): _compose builds the document.

_QUOTED: Final = re.compile(r"'(?!<)[^']*'|\"[^\"]*\"")


class _Refused(Exception):
    """Carries a Refusal out of deep checks; never leaves this module."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.code)
        self.refusal = refusal


def _refuse(code: Code, message: str) -> NoReturn:
    raise _Refused(Refusal(code.value, message))


def _load(text: str | bytes) -> object:
    size = len(text) if isinstance(text, bytes) or text.isascii() else _utf8_size(text)
    if size > MAX_SIZE:
        _refuse(
            Code.TOO_LARGE,
            "the kubeconfig is larger than 1 MiB: keep only the context Kokumi uses, with its "
            "cluster and user, e.g. with kubectl config view --minify --flatten",
        )
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError:
            _refuse(Code.NOT_YAML, "the kubeconfig is not UTF-8 text: save it as UTF-8")
    document: object
    if text.lstrip().startswith("{"):
        # client-go reads JSON as JSON; PyYAML's YAML 1.1 rejects some valid JSON (tabs, "\/").
        repeated: list[bool] = []

        def unique(pairs: list[tuple[str, object]]) -> dict[str, object]:
            mapping = dict(pairs)
            if len(mapping) != len(pairs):
                repeated.append(True)
            return mapping

        try:
            document = json.loads(text, object_pairs_hook=unique)
            # A \ud800 escape alone is no character; libyaml refuses it, and so does minimise.
            json.dumps(document, ensure_ascii=False).encode()
        except (ValueError, RecursionError):
            pass  # a YAML flow mapping, or broken: YAML says which
        else:
            if repeated:
                _repeated_json_key(text)
            return _nonempty(document)
    try:
        document = _compose(text)
    except yaml.MarkedYAMLError as error:
        _refuse(
            Code.NOT_YAML,
            f"the kubeconfig is not valid YAML or JSON{_where(error)}: fix its syntax",
        )
    except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError):
        _refuse(
            Code.NOT_YAML,
            "the kubeconfig is not valid YAML or JSON (a value cannot be read): fix its syntax",
        )
    return _nonempty(document)


MAX_DEPTH: Final = 64
"""A kubeconfig nests five or six levels; libyaml's composer recurses in C without a limit, so
Kokumi builds the document from the events itself and refuses one nested deeper than this."""

PARSE_BUDGET: Final = 2.0
"""Seconds of CPU a parse may take (of the thread it runs on). The typical kubeconfig costs a
fraction of a millisecond and a 1 MiB one of many tiny values about a second; a parse in a worker
thread cannot be cancelled from outside, so it stops itself here, whatever the text holds."""

_BUDGET_EVERY: Final = 256  # events between two looks at the clock

MAX_NUMBER: Final = 100
"""Characters of the longest number read as one: no kubeconfig field is a number that long, and
converting a long one costs time quadratic in its length."""

_STR: Final = "tag:yaml.org,2002:str"
_MAP: Final = "tag:yaml.org,2002:map"
_SEQ: Final = "tag:yaml.org,2002:seq"
_NULLS: Final = frozenset({"", "~", "null", "Null", "NULL"})
_TRUE: Final = frozenset({"yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"})
_FALSE: Final = frozenset({"no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"})
# YAML 1.1's integers and floats as PyYAML resolves them, without the base-60 forms (1:20:30),
# whose conversion is quadratic, and which no kubeconfig field holds.
_INT: Final = re.compile(
    r"[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+"
)
_FLOAT: Final = re.compile(
    r"[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)"
)
_TAGGED: Final = {
    "tag:yaml.org,2002:null": type(None),
    "tag:yaml.org,2002:bool": bool,
    "tag:yaml.org,2002:int": int,
    "tag:yaml.org,2002:float": float,
}


def _compose(text: str) -> object:
    """The document, built from the parser's events with only what a kubeconfig needs.

    A kubeconfig is strings, booleans and a few numbers in mappings and lists. YAML's extras
    are refused as their events come, before they cost anything: anchors and aliases (an alias
    bomb multiplies a few hundred bytes into gigabytes), merge keys (which copy), explicit tags
    other than the core schema's, and nesting deeper than :data:`MAX_DEPTH`. Scalars resolve as
    PyYAML's safe loader would, except base-60 numbers and timestamps, which stay strings (as
    kubectl reads them into its string fields). A key repeated in a mapping is refused at its
    second place, which a dict would silently keep instead of the first. Iterative, so depth
    costs no recursion.
    """
    started = time.thread_time()
    stack: list[list[object] | dict[object, object]] = []
    keys: list[object] = []  # per open mapping: the key waiting for its value, or _NO_KEY
    documents = 0
    result: object = None
    for count, event in enumerate(yaml.parse(text, Loader=_Loader)):
        if count % _BUDGET_EVERY == 0 and time.thread_time() - started > PARSE_BUDGET:
            _refuse(
                Code.TOO_COMPLEX,
                f"reading the kubeconfig took more than {PARSE_BUDGET:g} s of CPU: keep only the "
                f"context Kokumi uses, with its cluster and user, {_FLATTEN}",
            )
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            _refuse(
                Code.NOT_YAML,
                f"the kubeconfig uses YAML anchors or aliases (&, *){_at(event)}, which a "
                "kubeconfig has no need of: write each value out",
            )
        if isinstance(event, yaml.DocumentStartEvent):
            documents += 1
            if documents > 1:
                _syntax(
                    event, "expected a single document in the stream but found another document"
                )
            continue
        value: object
        if isinstance(event, yaml.ScalarEvent):
            value = _scalar(event)
        elif isinstance(event, yaml.CollectionStartEvent):
            _check_tag(event, _MAP if isinstance(event, yaml.MappingStartEvent) else _SEQ)
            if len(stack) >= MAX_DEPTH:
                _refuse(
                    Code.NOT_YAML,
                    f"the kubeconfig nests deeper than {MAX_DEPTH} levels: a kubeconfig is a "
                    "few levels deep; write it as kubectl config view --minify --flatten does",
                )
            container: list[object] | dict[object, object] = (
                {} if isinstance(event, yaml.MappingStartEvent) else []
            )
            stack.append(container)
            keys.append(_NO_KEY)
            continue
        elif isinstance(event, yaml.CollectionEndEvent):
            value = stack.pop()
            keys.pop()
        else:
            continue  # stream and document boundaries
        if not stack:
            result = value
            continue
        parent = stack[-1]
        if isinstance(parent, list):
            parent.append(value)
        elif keys[-1] is _NO_KEY:
            if isinstance(value, list | dict):
                _syntax(event, "found a mapping or a list as a key")
            if value == "<<" and isinstance(event, yaml.ScalarEvent) and not event.style:
                _refuse(
                    Code.NOT_YAML,
                    f"the kubeconfig uses a YAML merge key (<<){_at(event)}, which a kubeconfig "
                    "has no need of: write the mapping out",
                )
            if value in parent:  # one hash lookup: linear in the keys, whatever they are
                _repeated_key(value, _at(event))
            keys[-1] = value
        else:
            parent[keys[-1]] = value
            keys[-1] = _NO_KEY
    return result


_NO_KEY: Final = object()


def _at(event: yaml.Event) -> str:
    mark = event.start_mark
    return f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""


def _syntax(event: yaml.Event, problem: str) -> NoReturn:
    """Refused as PyYAML's composer would have: where, and its words (never the value)."""
    mark = event.start_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    _refuse(
        Code.NOT_YAML,
        f"the kubeconfig is not valid YAML or JSON ({where}{problem}): fix its syntax",
    )


# The keys of client-go's kubeconfig types (v1.Config and what it holds): a repeated key is named
# only if it is one of these, since any other key is text of the tenant's that could be anything.
_FIELDS: Final = frozenset(
    {
        *("apiVersion", "kind", "preferences", "clusters", "contexts", "users"),
        *("current-context", "extensions", "extension", "colors", "name", "cluster", "context"),
        *("user", "namespace", "server", "tls-server-name", "insecure-skip-tls-verify"),
        *("certificate-authority", "certificate-authority-data", "proxy-url"),
        *("disable-compression", "client-certificate", "client-certificate-data", "client-key"),
        *("client-key-data", "token", "tokenFile", "as", "as-uid", "as-groups", "as-user-extra"),
        *("username", "password", "auth-provider", "config", "exec", "command", "args", "env"),
        *("value", "installHint", "provideClusterInfo", "interactiveMode"),
    }
)


def _repeated_key(key: object, where: str) -> NoReturn:
    """Refuse a key given twice in one mapping, wherever it is: YAML forbids it and JSON leaves
    it open, so readers of the same text disagree (a dict, and client-go, keep the last value;
    yaml.v3, ruamel.yaml and js-yaml refuse the text). Read the last, Kokumi and Argo CD could
    reach another server than the next reader of the Secret does.
    """
    named = f"the key {quoted(key)}" if isinstance(key, str) and key in _FIELDS else "a key"
    _refuse(
        Code.DUPLICATE_KEY,
        f"the kubeconfig has {named} twice in one mapping{where}, and readers differ on which "
        "value counts: keep one",
    )


_JSON_TOKEN: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[{}\[\],]')


def _repeated_json_key(text: str) -> NoReturn:
    """Refuse the first key that ``text``, valid JSON with a repeated key, repeats, and say where.

    Python's JSON parser tells that an object repeats a key, but not where; one pass over the
    strings and brackets (linear: the string pattern never backtracks) finds it in text order, as
    the YAML reader would.
    """
    open_keys: list[set[str] | None] = []  # per open object its keys so far; None for a list
    key_next = False
    for token in _JSON_TOKEN.finditer(text):
        lexeme = token.group()
        if lexeme == "{":
            open_keys.append(set())
            key_next = True
        elif lexeme == "[":
            open_keys.append(None)
            key_next = False
        elif lexeme in ("}", "]"):
            open_keys.pop()
            key_next = False
        elif lexeme == ",":
            key_next = open_keys[-1] is not None
        elif key_next:
            keys = open_keys[-1]
            assert keys is not None
            key = json.loads(lexeme)
            if key in keys:
                start = token.start()
                line = text.count("\n", 0, start) + 1
                column = start - text.rfind("\n", 0, start)
                _repeated_key(key, f" (line {line}, column {column})")
            keys.add(key)
            key_next = False
    raise RuntimeError("JSON with a repeated key, but none found")  # a bug: InternalError


def _check_tag(event: yaml.NodeEvent, own: str) -> None:
    tag = getattr(event, "tag", None)
    if tag is not None and tag not in ("!", own):
        _syntax(event, "could not determine a constructor for the tag …")


def _scalar(event: yaml.ScalarEvent) -> object:
    value: str = event.value
    tag = event.tag
    if event.style or tag in ("!", _STR):  # quoted or a block scalar: libyaml says "" for plain
        if tag not in (None, "!", _STR):
            _check_tag(event, _STR)
        return value  # quoted, or tagged as a string
    resolved = _resolve(value)
    if tag is None:
        return resolved
    wanted = _TAGGED.get(tag)
    if wanted is None or type(resolved) is not wanted:
        _check_tag(event, _STR)
    return resolved


def _resolve(value: str) -> object:
    """A plain scalar as YAML 1.1's core schema reads it, minus base-60 and timestamps."""
    if value in _NULLS:
        return None
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    if not value or value[0] not in "+-.0123456789":
        return value
    if len(value) > MAX_NUMBER and (_INT.fullmatch(value) or _FLOAT.fullmatch(value)):
        _refuse(
            Code.NOT_YAML,
            f"the kubeconfig holds a number longer than {MAX_NUMBER} characters, which no "
            "kubeconfig field is: quote it if it is text",
        )
    if _INT.fullmatch(value):
        digits = value.replace("_", "")
        sign = -1 if digits[0] == "-" else 1
        digits = digits.lstrip("+-")
        if digits.startswith("0b"):
            return sign * int(digits[2:], 2)
        if digits.startswith("0x"):
            return sign * int(digits[2:], 16)
        if digits != "0" and digits.startswith("0"):
            return sign * int(digits, 8)
        return sign * int(digits)
    if _FLOAT.fullmatch(value):
        lowered = value.replace("_", "").lower()
        if lowered.endswith(".inf"):
            return float("-inf") if lowered.startswith("-") else float("inf")
        if lowered == ".nan":
            return float("nan")
        return float(lowered)
    return value


def _utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _nonempty(document: object) -> object:
    if document is None:
        _refuse(Code.EMPTY, "the kubeconfig is empty: store the kubeconfig itself in the Secret")
    return document


def _where(error: yaml.MarkedYAMLError) -> str:
    """Line, column and the parser's words, minus anything quoted: a quote could hold a token."""
    parts = []
    if error.problem_mark is not None:
        parts.append(f"line {error.problem_mark.line + 1}, column {error.problem_mark.column + 1}")
    problem = error.problem or ""
    if problem.startswith("but ") and error.context:
        problem = f"{error.context} {problem}"  # "expected a single document … but found another"
    problem = _QUOTED.sub("…", problem)[:120].strip()
    if problem and problem.isprintable():
        parts.append(problem)
    return f" ({': '.join(parts)})" if parts else " (a value cannot be read)"


# --- reading ------------------------------------------------------------------------------------

_Body = dict[object, object]


@attrs.frozen
class _Entry:
    """One named entry of a list, as messages name it: ``user "kokumi"`` and ``users[].user``."""

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


_TOP: Final = _Top()
_Owner = _Entry | _Top

_KUBECONFIG_FIELDS: Final = ("clusters", "contexts", "users", "current-context")
_IMPERSONATION: Final = ("as", "as-uid", "as-groups", "as-user-extra")
_INLINE: Final = "use a ServiceAccount token or a client certificate inline"
_FLATTEN: Final = "e.g. with kubectl config view --minify --flatten"


def _read(document: object, context: str | None) -> tuple[tuple[str, str, str], Connection]:
    """The names of the context, cluster and user used, and their Connection."""
    if not isinstance(document, dict):
        if isinstance(document, str):
            _not_a_kubeconfig(document)
        _refuse(
            Code.NOT_KUBECONFIG,
            f"the kubeconfig is {type_name(document, 'yaml')}, not a mapping: store a kubeconfig, "
            "with clusters, contexts, users and current-context",
        )
    kind = document.get("kind")
    if kind is not None and kind != "Config":
        _refuse(
            Code.NOT_KUBECONFIG,
            "the document's kind is not Config (kind): store a kubeconfig, not another object",
        )
    api_version = document.get("apiVersion")
    if api_version is not None and api_version != "v1":
        _refuse(
            Code.NOT_KUBECONFIG, "the kubeconfig's apiVersion is not v1 (apiVersion): set it to v1"
        )
    if not any(field in document for field in _KUBECONFIG_FIELDS):
        _refuse(
            Code.NOT_KUBECONFIG,
            "the document has none of a kubeconfig's fields (clusters, contexts, users, "
            "current-context): store a kubeconfig",
        )
    _no_extensions(document, _TOP, "extensions")
    preferences = document.get("preferences")
    if isinstance(preferences, dict):
        _no_extensions(preferences, _TOP, "preferences.extensions")

    if context is None:
        current = _string(document, "current-context", _TOP)
        if current is None:
            _refuse(
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
    ctx = _Entry("context", context)
    context_body = _body(_find(document, ctx, Code.UNKNOWN_CONTEXT, missing), ctx)
    _no_extensions(context_body, ctx, ctx.path("extensions"))

    cluster_name = _string(context_body, "cluster", ctx)
    if cluster_name is None:
        _refuse(
            Code.UNKNOWN_CLUSTER,
            f"{ctx} names no cluster ({ctx.path('cluster')}): set it to the name of an entry "
            "of clusters",
        )
    user_name = _string(context_body, "user", ctx)
    if user_name is None:
        _refuse(
            Code.UNKNOWN_USER,
            f"{ctx} names no user ({ctx.path('user')}): set it to the name of an entry of users",
        )
    cluster_owner = _Entry("cluster", cluster_name)
    missing = (
        f"{ctx} names {cluster_owner}, which is not in clusters ({ctx.path('cluster')}): add the "
        "cluster or name one that is there"
    )
    cluster = _body(_find(document, cluster_owner, Code.UNKNOWN_CLUSTER, missing), cluster_owner)
    user_owner = _Entry("user", user_name)
    missing = (
        f"{ctx} names {user_owner}, which is not in users ({ctx.path('user')}): add the user or "
        "name one that is there"
    )
    user = _body(_find(document, user_owner, Code.UNKNOWN_USER, missing), user_owner)

    _refuse_user_mechanisms(user, user_owner)
    _refuse_cluster_mechanisms(cluster, cluster_owner)
    connection = _connection(cluster, cluster_owner, user, user_owner)
    return (context, cluster_name, user_name), connection


def _find(document: _Body, owner: _Entry, code: Code, missing: str) -> _Body:
    """The one entry of that name; the others may hold anything, since kubectl ignores them too."""
    plural = f"{owner.kind}s"
    entries = document.get(plural)
    if entries is None:
        entries = []
    if not isinstance(entries, list):
        _wrong_type(_TOP, plural, plural, entries, "list")
    found = [e for e in entries if isinstance(e, dict) and e.get("name") == owner.name]
    if not found:
        _refuse(code, missing)
    if len(found) > 1:
        # client-go refuses the whole kubeconfig then; which entry was meant is anybody's guess.
        _refuse(
            Code.DUPLICATE_NAME,
            f"{owner} appears {len(found)} times in {plural} ({plural}[].name): keep one",
        )
    return found[0]


def _body(entry: _Body, owner: _Entry) -> _Body:
    body = entry.get(owner.kind)
    if body is None:
        return {}  # as in client-go: an entry without a body is an empty one
    if not isinstance(body, dict):
        _wrong_type(owner, owner.kind, owner.path(), body, "mapping")
    return body


def _refuse_user_mechanisms(user: _Body, owner: _Entry) -> None:
    if _present(user.get("exec")):
        _refuse(
            Code.EXEC_PLUGIN,
            f"{owner} uses an exec plugin ({owner.path('exec')}), which Kokumi does not run: "
            f"{_INLINE}",
        )
    if _present(user.get("auth-provider")):
        _refuse(
            Code.AUTH_PROVIDER,
            f"{owner} uses an auth provider ({owner.path('auth-provider')}), which Kokumi does not "
            f"run: {_INLINE}",
        )
    basic = [field for field in ("username", "password") if _present(user.get(field))]
    if basic:
        _refuse(
            Code.BASIC_AUTH,
            f"{owner} uses basic authentication ({owner.path(', '.join(basic))}), which "
            f"Kubernetes does not offer: {_INLINE}",
        )
    if _present(user.get("client-certificate")):
        _refuse(
            Code.FILE_PATH,
            f"{owner} reads its client certificate from a file "
            f"({owner.path('client-certificate')}), which Kokumi cannot read: embed it as "
            f"client-certificate-data, {_FLATTEN}",
        )
    if _present(user.get("client-key")):
        _refuse(
            Code.FILE_PATH,
            f"{owner} reads its client key from a file ({owner.path('client-key')}), which "
            f"Kokumi cannot read: embed it as client-key-data, {_FLATTEN}",
        )
    if _present(user.get("tokenFile")):
        _refuse(
            Code.FILE_PATH,
            f"{owner} reads its token from a file ({owner.path('tokenFile')}), which Kokumi cannot "
            "read: put the token itself into token",
        )
    impersonation = [field for field in _IMPERSONATION if _present(user.get(field))]
    if impersonation:
        # Argo CD would connect as the user itself, with rights the kubeconfig did not mean to use.
        _refuse(
            Code.IMPERSONATION,
            f"{owner} impersonates another identity ({owner.path(impersonation[0])}), which "
            "Kokumi does not do: use a credential of the identity Kokumi should act as",
        )
    _no_extensions(user, owner, owner.path("extensions"))


def _refuse_cluster_mechanisms(cluster: _Body, owner: _Entry) -> None:
    if _present(cluster.get("certificate-authority")):
        _refuse(
            Code.FILE_PATH,
            f"{owner} reads its CA from a file ({owner.path('certificate-authority')}), which "
            f"Kokumi cannot read: embed it as certificate-authority-data, {_FLATTEN}",
        )
    _no_extensions(cluster, owner, owner.path("extensions"))


def _no_extensions(body: _Body, owner: _Owner, path: str) -> None:
    if _present(body.get("extensions")):
        # What an extension configures (a proxy, a plugin's settings) would silently be lost.
        _refuse(
            Code.EXTENSION,
            f"{owner} has extensions ({path}), which Kokumi does not apply: remove them",
        )


# --- the connection -----------------------------------------------------------------------------


def _connection(
    cluster: _Body, cluster_owner: _Entry, user: _Body, user_owner: _Entry
) -> Connection:
    server = _string(cluster, "server", cluster_owner)
    if server is None:
        _refuse(
            Code.NO_SERVER,
            f"{cluster_owner} has no server ({cluster_owner.path('server')}): set it to the API "
            "server's URL as Kokumi's cluster reaches it, e.g. https://spoke.example:6443",
        )
    _check_server(server, cluster_owner)

    proxy_url = _string(cluster, "proxy-url", cluster_owner)
    if proxy_url is not None and _url_problem(proxy_url, _PROXY_SCHEMES) not in (None, "userinfo"):
        _refuse(
            Code.INVALID_PROXY_URL,
            f"{cluster_owner} has a proxy-url that is not an http, https or socks5 URL "
            f"({cluster_owner.path('proxy-url')}): write it as http://proxy.example:3128",
        )
    tls_server_name = _string(cluster, "tls-server-name", cluster_owner)
    if tls_server_name is not None and (
        not _SERVER_NAME.fullmatch(tls_server_name) or _tls_refuses(tls_server_name)
    ):
        _refuse(
            Code.INVALID_TLS_SERVER_NAME,
            f"{cluster_owner} has a tls-server-name that is not a host name "
            f"({cluster_owner.path('tls-server-name')}): set it to a name in the API server's "
            "certificate",
        )
    insecure = cluster.get("insecure-skip-tls-verify")
    if insecure is None:
        insecure = False
    if not isinstance(insecure, bool):
        _wrong_type(
            cluster_owner,
            "insecure-skip-tls-verify",
            cluster_owner.path("insecure-skip-tls-verify"),
            insecure,
            "boolean",
        )
    ca_data = _string(cluster, "certificate-authority-data", cluster_owner)
    if insecure and ca_data is not None:
        _refuse(
            Code.INSECURE_WITH_CA,
            f"{cluster_owner} has both certificate-authority-data and insecure-skip-tls-verify "
            f"({cluster_owner.path('insecure-skip-tls-verify')}), which kubectl refuses too: keep "
            "the CA and remove insecure-skip-tls-verify",
        )
    authority = None if ca_data is None else _certificate_authority(ca_data, cluster_owner)

    token = _string(user, "token", user_owner)
    certificate_data = _string(user, "client-certificate-data", user_owner)
    key_data = _string(user, "client-key-data", user_owner)
    if token is None and certificate_data is None and key_data is None:
        _refuse(
            Code.NO_CREDENTIAL,
            f"{user_owner} has no credential ({user_owner.path()}): add a token, or "
            "client-certificate-data and client-key-data",
        )
    if token is not None:
        _check_token(token, user_owner)
    certificate, key = _client_certificate(certificate_data, key_data, user_owner)
    return Connection(
        server=server,
        token=token,
        client_certificate=certificate,
        client_key=key,
        certificate_authority=authority,
        tls_server_name=tls_server_name,
        insecure_skip_tls_verify=insecure,
        proxy_url=proxy_url,
    )


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


def _check_server(server: str, owner: _Entry) -> None:
    path = owner.path("server")
    problem = _url_problem(server, _SERVER_SCHEMES)
    if problem == "url":
        _refuse(
            Code.INVALID_SERVER,
            f"{owner} has a server that is not an absolute http or https URL ({path}): write it "
            "as https://host:port",
        )
    if problem == "userinfo":
        _refuse(
            Code.INVALID_SERVER,
            f"{owner} has a user name or password in its server URL ({path}): remove them and "
            "put the credential into the user",
        )
    if problem == "query":
        _refuse(
            Code.INVALID_SERVER,
            f"{owner} has a query or fragment in its server URL ({path}): write it as "
            "https://host:port, with a path only if the API server is served under one",
        )
    if problem == "host":
        _refuse(
            Code.INVALID_SERVER,
            f"{owner} has a server whose host name has an empty label or one over 63 characters "
            f"({path}): write the API server's DNS name or address",
        )


def _check_token(token: str, owner: _Entry) -> None:
    if _VISIBLE_ASCII.fullmatch(token):
        return
    path = owner.path("token")
    if any(character.isspace() for character in token):
        _refuse(
            Code.INVALID_TOKEN,
            f"{owner} has whitespace in its token ({path}): copy the token without spaces or "
            "line breaks",
        )
    _refuse(
        Code.INVALID_TOKEN,
        f"{owner} has characters in its token that cannot go into an HTTP header ({path}): copy "
        "the token as its Secret holds it, decoded from base64",
    )


# --- certificates and keys ----------------------------------------------------------------------

_PRIVATE_KEY_PEM: Final = re.compile(rb"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")
_CERTIFICATE_PEM: Final = b"-----BEGIN CERTIFICATE-----"
_CURVES: Final = frozenset({"secp256r1", "secp384r1", "secp521r1"})  # those Go's TLS signs with


def _decode(value: str, owner: _Entry, field: str, code: Code) -> bytes:
    """Base64 as client-go reads it: the standard alphabet, padded, line breaks ignored."""
    path = owner.path(field)
    try:
        data = base64.b64decode(value.replace("\r", "").replace("\n", ""), validate=True)
    except (binascii.Error, ValueError):
        _refuse(
            code,
            f"{owner} has {field} that is not base64 ({path}): put the base64 of the PEM file "
            "there, e.g. from base64 -w0",
        )
    if b"-----BEGIN " not in data:
        try:
            twice = base64.b64decode(data.replace(b"\r", b"").replace(b"\n", b""), validate=True)
        except (binascii.Error, ValueError):
            twice = b""
        if b"-----BEGIN " in twice:
            _refuse(code, f"{owner} has {field} encoded in base64 twice ({path}): decode it once")
    return data


def _certificate_authority(value: str, owner: _Entry) -> bytes:
    field = "certificate-authority-data"
    path = owner.path(field)
    code = Code.INVALID_CERTIFICATE_AUTHORITY
    data = _decode(value, owner, field, code)
    if _PRIVATE_KEY_PEM.search(data):
        _refuse(
            code,
            f"{owner} has a private key in {field} ({path}): keep only the CA's certificates "
            "there, and replace the key, since it has been shared",
        )
    if _CERTIFICATE_PEM not in data:
        _refuse(
            code,
            f"{owner} has {field} that holds no PEM certificate ({path}): put the base64 of the "
            "CA's PEM certificates there",
        )
    try:
        x509.load_pem_x509_certificates(data)
    except ValueError:
        _refuse(
            code,
            f"{owner} has {field} with a certificate that does not parse ({path}): put the "
            "base64 of the CA's PEM certificates there",
        )
    return data


def _client_certificate(
    certificate_data: str | None, key_data: str | None, owner: _Entry
) -> tuple[bytes | None, bytes | None]:
    if certificate_data is None and key_data is None:
        return None, None
    if key_data is None:
        _refuse(
            Code.INCOMPLETE_CLIENT_CERTIFICATE,
            f"{owner} has client-certificate-data but no client-key-data "
            f"({owner.path('client-key-data')}): add the key the certificate was issued for",
        )
    if certificate_data is None:
        _refuse(
            Code.INCOMPLETE_CLIENT_CERTIFICATE,
            f"{owner} has client-key-data but no client-certificate-data "
            f"({owner.path('client-certificate-data')}): add the certificate issued for the key",
        )

    field = "client-certificate-data"
    code = Code.INVALID_CLIENT_CERTIFICATE
    certificate_pem = _decode(certificate_data, owner, field, code)
    if _CERTIFICATE_PEM not in certificate_pem:
        _refuse(
            code,
            f"{owner} has {field} that holds no PEM certificate ({owner.path(field)}): put the "
            "base64 of the client's PEM certificate there",
        )
    try:
        # Like Go's tls.X509KeyPair: the first certificate is the client's, the rest its chain.
        leaf = x509.load_pem_x509_certificates(certificate_pem)[0]
        public_key = leaf.public_key()
    except (ValueError, UnsupportedAlgorithm):
        _refuse(
            code,
            f"{owner} has {field} with a certificate that does not parse ({owner.path(field)}): "
            "put the base64 of the client's PEM certificate there",
        )

    field = "client-key-data"
    code = Code.INVALID_CLIENT_KEY
    path = owner.path(field)
    key_pem = _decode(key_data, owner, field, code)
    if not _PRIVATE_KEY_PEM.search(key_pem):
        _refuse(
            code,
            f"{owner} has {field} that holds no PEM private key ({path}): put the base64 of the "
            "client's PEM private key there",
        )
    try:
        # Consistency of an RSA key's private parts costs 40 ms to check; the signature below
        # proves in 1 ms what matters, that the key signs for the certificate's public key.
        key = serialization.load_pem_private_key(
            key_pem, password=None, unsafe_skip_rsa_key_validation=True
        )
    except TypeError:
        _refuse(
            code,
            f"{owner} has {field} that is encrypted ({path}): store the key unencrypted, e.g. "
            "from openssl pkey -in key.pem",
        )
    except (ValueError, UnsupportedAlgorithm):
        _refuse(
            code,
            f"{owner} has {field} with a private key that does not parse ({path}): put the "
            "base64 of the client's PEM private key there",
        )
    _check_key_type(key, owner)
    if not _signs_for(key, public_key):
        _refuse(
            Code.CLIENT_KEY_MISMATCH,
            f"{owner} has a client key that does not belong to its client certificate ({path}): "
            "use the key the certificate was issued for",
        )
    return certificate_pem, key_pem


def _check_key_type(key: object, owner: _Entry) -> None:
    path = owner.path("client-key-data")
    if isinstance(key, rsa.RSAPrivateKey):
        if not 1024 <= key.key_size <= 8192:
            _refuse(
                Code.INVALID_CLIENT_KEY,
                f"{owner} has an RSA client key of {key.key_size} bits ({path}): use one of "
                "1024 to 8192 bits, as Kubernetes clients accept",
            )
        return
    if isinstance(key, ec.EllipticCurvePrivateKey):
        if key.curve.name not in _CURVES:
            _refuse(
                Code.INVALID_CLIENT_KEY,
                f"{owner} has an EC client key on a curve TLS clients do not sign with ({path}): "
                "use P-256, P-384 or P-521",
            )
        return
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return
    _refuse(
        Code.INVALID_CLIENT_KEY,
        f"{owner} has a client key of a type TLS clients do not sign with ({path}): use an RSA, "
        "ECDSA or Ed25519 key",
    )


def _signs_for(key: object, public_key: object) -> bool:
    message = b"kokumi: does this key belong to this certificate?"
    try:
        if isinstance(key, rsa.RSAPrivateKey) and isinstance(public_key, rsa.RSAPublicKey):
            signature = key.sign(message, padding.PKCS1v15(), hashes.SHA256())
            public_key.verify(signature, message, padding.PKCS1v15(), hashes.SHA256())
            return True
        if isinstance(key, ec.EllipticCurvePrivateKey) and isinstance(
            public_key, ec.EllipticCurvePublicKey
        ):
            signature = key.sign(message, ec.ECDSA(hashes.SHA256()))
            public_key.verify(signature, message, ec.ECDSA(hashes.SHA256()))
            return True
        if isinstance(key, ed25519.Ed25519PrivateKey) and isinstance(
            public_key, ed25519.Ed25519PublicKey
        ):
            public_key.verify(key.sign(message), message)
            return True
    except (InvalidSignature, ValueError, TypeError):
        return False
    return False


# --- small helpers ------------------------------------------------------------------------------


def _present(value: object) -> bool:
    """Set to something: kubectl treats null, "" and empty lists or mappings as absent."""
    if value is None:
        return False
    return not (isinstance(value, str | list | dict) and len(value) == 0)


def _string(body: _Body, key: str, owner: _Owner) -> str | None:
    value = body.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        _wrong_type(owner, key, owner.path(key), value, "string")
    return value


_FIXES: Final = {
    "string": "quote the value",
    "boolean": "write true or false, without quotes",
    "list": "write it as a list",
    "mapping": "write it as a mapping",
}


def _wrong_type(owner: _Owner, key: str, path: str, value: object, expected: str) -> NoReturn:
    _refuse(
        Code.WRONG_TYPE,
        f"{owner} has {key} as {type_name(value, 'yaml')}, not a {expected} ({path}): "
        f"{_FIXES[expected]}",
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
            _refuse(
                Code.NOT_KUBECONFIG,
                f"the kubeconfig is a PEM private key ({label}), not a kubeconfig: store the "
                "kubeconfig; a client key belongs in its user's client-key-data",
            )
        if label.endswith("CERTIFICATE"):
            _refuse(
                Code.NOT_KUBECONFIG,
                f"the kubeconfig is a PEM certificate ({label}), not a kubeconfig: store the "
                "kubeconfig; a CA certificate belongs in its cluster's certificate-authority-data",
            )
        _refuse(
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
            _refuse(
                Code.NOT_KUBECONFIG,
                "the kubeconfig is base64-encoded once more than it should be: store the "
                "kubeconfig's text (the Secret's data is base64 of it, nothing more)",
            )
