"""The manager's own connection to its API server: a kubeconfig file, or the pod's service account.

This is the operator's trusted configuration, so reading files named in it is fine (unlike a
Cluster's kubeconfig, which :mod:`kokumi.core.kubeconfig` treats as hostile). Credentials are kept
out of ``repr`` so that a ``Config`` in a log line never shows them.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import enum
import ipaddress
import json
import logging
import os
import ssl
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, Protocol, runtime_checkable

import attrs
import trio
import yaml

from .errors import ConfigError
from .tls import ssl_context

__all__ = [
    "SERVICE_ACCOUNT_ROOT",
    "Config",
    "ExecToken",
    "FileToken",
    "StaticToken",
    "TokenProvider",
    "flatten_context",
]

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_ROOT = "/var/run/secrets/kubernetes.io/serviceaccount"


@runtime_checkable
class TokenProvider(Protocol):
    """Where the bearer token comes from, asked before every request.

    A provider decides itself how long a token may be cached. ``refresh`` is called after a 401;
    it returns the token to retry with, or ``None`` when it has nothing newer (no retry then).
    """

    async def token(self) -> str: ...

    async def refresh(self) -> str | None: ...


@attrs.frozen
class StaticToken:
    """A token written into a kubeconfig: it cannot change, so a 401 is final."""

    value: str = attrs.field(repr=False)

    async def token(self) -> str:
        return self.value

    async def refresh(self) -> str | None:
        return None


@attrs.define(eq=False)
class FileToken:
    """A token file that somebody else rotates (the kubelet's projected service-account token).

    Bound tokens expire (an hour by default), and the kubelet rewrites the file well before that.
    Re-reading it about once a minute, and at once after a 401, follows the rotation without a
    restart. A failed re-read keeps the previous token: a half-written file must not stop the
    manager.
    """

    path: Path
    max_age: float = 60.0
    #: Wall-independent seconds. Not ``trio.current_time``: a Config may outlive one Trio run,
    #: and every run's clock has its own origin.
    clock: Callable[[], float] = attrs.field(default=time.monotonic, repr=False)
    _value: str | None = attrs.field(default=None, init=False, repr=False)
    _read_at: float = attrs.field(default=float("-inf"), init=False, repr=False)

    async def token(self) -> str:
        if self._value is None or self.clock() - self._read_at >= self.max_age:
            await self._reread()
        assert self._value is not None
        return self._value

    async def refresh(self) -> str | None:
        before = self._value
        await self._reread()
        return self._value if self._value != before else None

    async def _reread(self) -> None:
        try:
            value = (await trio.Path(self.path).read_text(encoding="utf-8")).strip()
        except OSError as exc:
            if self._value is None:
                raise ConfigError(
                    f"cannot read the token file {self.path}: {exc.strerror}"
                ) from None
            log.warning("cannot re-read the token file %s: %s", self.path, exc.strerror)
            return
        if not value:
            if self._value is None:
                raise ConfigError(f"the token file {self.path} is empty")
            return
        self._value = value
        self._read_at = self.clock()


@attrs.define(eq=False)
class ExecToken:
    """A token from a client-go credential plugin (``exec``), run as kubectl runs it.

    Only for a person's own kubeconfig, which names programs that person chose to run (the CLI
    uses it to reach a cluster whose context signs in with a cloud's plugin). The manager never
    runs one: a kubeconfig it reads could name any program. The token is kept until the
    ``expirationTimestamp`` the plugin gives, or until a 401, as client-go keeps it.
    """

    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    api_version: str = "client.authentication.k8s.io/v1"
    clock: Callable[[], datetime.datetime] = attrs.field(
        default=lambda: datetime.datetime.now(datetime.UTC), repr=False
    )
    _value: str | None = attrs.field(default=None, init=False, repr=False)
    _expires: datetime.datetime | None = attrs.field(default=None, init=False, repr=False)

    async def token(self) -> str:
        if self._value is None or (self._expires is not None and self.clock() >= self._expires):
            await self._run()
        assert self._value is not None
        return self._value

    async def refresh(self) -> str | None:
        before = self._value
        await self._run()
        return self._value if self._value != before else None

    async def _run(self) -> None:
        info = {
            "apiVersion": self.api_version,
            "kind": "ExecCredential",
            "spec": {"interactive": False},
        }
        environment = {**os.environ, **dict(self.env), "KUBERNETES_EXEC_INFO": json.dumps(info)}
        name = Path(self.command).name
        try:
            result = await trio.run_process(
                [self.command, *self.args],
                stdin=subprocess.DEVNULL,
                capture_stdout=True,
                capture_stderr=True,
                env=environment,
                check=False,
            )
        except OSError as exc:
            raise ConfigError(f"cannot run the credential plugin {name}: {exc.strerror}") from None
        if result.returncode != 0:
            # Not its output: a plugin may print a credential before it fails.
            raise ConfigError(
                f"the credential plugin {name} failed (exit status {result.returncode}): run it "
                "yourself to see why, e.g. sign in to its cloud first"
            )
        try:
            status = json.loads(result.stdout)["status"]
            token = status.get("token")
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ConfigError(
                f"the credential plugin {name} printed no ExecCredential with a status"
            ) from None
        if not isinstance(token, str) or not token:
            raise ConfigError(
                f"the credential plugin {name} gave no token (a client certificate is not "
                "supported): use a plugin that returns a token"
            )
        self._value = token
        self._expires = _timestamp(status.get("expirationTimestamp"))


def _timestamp(value: object) -> datetime.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


class _Unset(enum.Enum):
    UNSET = enum.auto()


_UNSET: Final = _Unset.UNSET


@attrs.frozen(init=False)
class Config:
    """How to reach and authenticate to one API server.

    ``client_certificate``, ``client_key`` and ``certificate_authority`` are PEM bytes, named
    in the kubeconfig's own words, whether it gives the PEM inline (``-data``) or as a file.
    ``tls_server_name`` is the name sent in SNI and checked against the server's certificate
    when it differs from the URL's host.

    ``kokumi.Config`` is public, so the names its TLS fields had before still work, as keywords
    and as attributes (see ``__init__``).
    """

    server: str
    token: TokenProvider | None = attrs.field(default=None, repr=False)
    client_certificate: bytes | None = attrs.field(default=None, repr=False)
    client_key: bytes | None = attrs.field(default=None, repr=False)
    certificate_authority: bytes | None = None
    tls_server_name: str | None = None
    insecure_skip_tls_verify: bool = False
    proxy_url: str | None = None
    namespace: str = "default"

    # --- the old names, kept for embedders ---
    # client_cert, ca and insecure: a keyword of the old name, when given, wins, which keeps
    # attrs.evolve(config, ca=...) working too.
    def __init__(
        self,
        server: str,
        token: TokenProvider | None = None,
        client_certificate: bytes | None = None,
        client_key: bytes | None = None,
        certificate_authority: bytes | None = None,
        tls_server_name: str | None = None,
        insecure_skip_tls_verify: bool = False,
        proxy_url: str | None = None,
        namespace: str = "default",
        *,
        client_cert: bytes | _Unset | None = _UNSET,
        ca: bytes | _Unset | None = _UNSET,
        insecure: bool | _Unset = _UNSET,
    ) -> None:
        self.__attrs_init__(
            server,
            token,
            client_certificate if isinstance(client_cert, _Unset) else client_cert,
            client_key,
            certificate_authority if isinstance(ca, _Unset) else ca,
            tls_server_name,
            insecure_skip_tls_verify if isinstance(insecure, _Unset) else insecure,
            proxy_url,
            namespace,
        )

    @property
    def client_cert(self) -> bytes | None:
        """The old name of ``client_certificate``."""
        return self.client_certificate

    @property
    def ca(self) -> bytes | None:
        """The old name of ``certificate_authority``."""
        return self.certificate_authority

    @property
    def insecure(self) -> bool:
        """The old name of ``insecure_skip_tls_verify``."""
        return self.insecure_skip_tls_verify

    # --- end of the old names ---

    def ssl_context(self) -> ssl.SSLContext:
        """A TLS context trusting only ``certificate_authority`` (or the system store without it).

        Built by :func:`kokumi.kube.tls.ssl_context`, the one builder every connection shares,
        so that the client key touches the disk only briefly, in a private file.
        """
        return ssl_context(
            self.certificate_authority,
            self.client_certificate,
            self.client_key,
            self.insecure_skip_tls_verify,
        )

    @classmethod
    def load(cls, *, root: str | os.PathLike[str] = SERVICE_ACCOUNT_ROOT) -> Config:
        """In a pod, the service account; elsewhere, the kubeconfig (as kubectl would pick it)."""
        if os.environ.get("KUBERNETES_SERVICE_HOST") and Path(root, "token").is_file():
            return cls.in_cluster(root=root)
        return cls.from_kubeconfig()

    @classmethod
    def in_cluster(
        cls,
        root: str | os.PathLike[str] = SERVICE_ACCOUNT_ROOT,
        *,
        token_max_age: float = 60.0,
    ) -> Config:
        """The pod's own service account, mounted at ``root``, and the ``kubernetes`` Service."""
        host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "")
        if not host or not port:
            raise ConfigError(
                "not running in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT"
                " must be set"
            )
        directory = Path(root)
        token_path = directory / "token"
        if not token_path.is_file():
            raise ConfigError(f"no service-account token at {token_path}")
        try:
            ca = (directory / "ca.crt").read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read {directory / 'ca.crt'}: {exc.strerror}") from None
        try:
            namespace = (directory / "namespace").read_text(encoding="utf-8").strip()
        except OSError:
            namespace = ""
        return cls(
            server=f"https://{_host_for_url(host)}:{port}",
            token=FileToken(token_path, max_age=token_max_age),
            certificate_authority=ca,
            namespace=namespace or "default",
        )

    @classmethod
    def from_kubeconfig(
        cls,
        path: str | os.PathLike[str] | None = None,
        context: str | None = None,
        *,
        run_exec: bool = False,
    ) -> Config:
        """A context of a kubeconfig: ``path``, else ``$KUBECONFIG`` (merged), else ~/.kube/config.

        Supported: bearer token (inline or ``tokenFile``), client certificate and key (files or
        ``*-data``), the CA, ``tls-server-name``, ``insecure-skip-tls-verify`` and ``proxy-url``.
        Exec plugins and auth providers run programs or keep state; they are refused clearly,
        unless ``run_exec`` allows an exec plugin (:class:`ExecToken`) for a person's own
        kubeconfig.
        """
        return _from_merged(_load_merged(path), context, run_exec=run_exec)


def flatten_context(
    path: str | os.PathLike[str] | None = None, context: str | None = None
) -> tuple[str, dict[str, Any]]:
    """One context of a kubeconfig, with its cluster and user, holding everything itself.

    What ``kubectl config view --minify --flatten`` prints: the files the cluster and user name
    (certificate-authority, client-certificate, client-key, tokenFile) are read, relative to the
    kubeconfig that names them, and inlined as ``*-data`` and ``token``. Everything else is kept
    as written, so whoever validates the result sees an exec plugin or an auth provider too.
    Returns the context's name and the document. The files are found as for
    :meth:`Config.from_kubeconfig`.
    """
    merged = _load_merged(path)
    name = context or merged.current_context
    if not name:
        raise ConfigError("the kubeconfig has no current-context; name a context")
    if name not in merged.contexts:
        raise ConfigError(f"the kubeconfig has no context {name!r}")
    body = dict(merged.contexts[name])
    document: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [],
        "contexts": [{"name": name, "context": body}],
        "current-context": name,
        "users": [],
    }
    cluster_name = _text(body.get("cluster"))
    if cluster_name in merged.clusters:
        base, cluster = merged.clusters[cluster_name]
        document["clusters"].append(
            {"name": cluster_name, "cluster": _inline(cluster, base, ("certificate-authority",))}
        )
    user_name = _text(body.get("user"))
    if user_name in merged.users:
        base, user = merged.users[user_name]
        inlined = _inline(user, base, ("client-certificate", "client-key"))
        token_file = _text(inlined.pop("tokenFile", None))
        if token_file and not _text(inlined.get("token")):
            token_path = _resolve(base, token_file)
            try:
                inlined["token"] = token_path.read_text(encoding="utf-8").strip()
            except OSError as exc:
                raise ConfigError(f"cannot read tokenFile {token_path}: {exc.strerror}") from None
        document["users"].append({"name": user_name, "user": inlined})
    return name, document


def _inline(section: Mapping[str, Any], base: Path, keys: tuple[str, ...]) -> dict[str, Any]:
    """``section`` with each file named under ``keys`` read into ``key-data`` (base64)."""
    result = dict(section)
    for key in keys:
        file_name = _text(result.pop(key, None))
        if not file_name or result.get(f"{key}-data"):
            continue  # kubectl prefers the inline data, as _blob does
        blob = _blob({key: file_name}, key, base)
        if blob is not None:
            result[f"{key}-data"] = base64.b64encode(blob).decode("ascii")
    return result


def _load_merged(path: str | os.PathLike[str] | None) -> _Merged:
    """``path``, else ``$KUBECONFIG`` (merged), else ~/.kube/config, as kubectl picks them."""
    if path is not None:
        paths = [Path(path)]
    elif os.environ.get("KUBECONFIG"):
        paths = [Path(p) for p in os.environ["KUBECONFIG"].split(os.pathsep) if p]
    else:
        paths = [Path.home() / ".kube" / "config"]
    merged = _merge([(p, _read_yaml(p)) for p in paths if path is not None or p.exists()])
    if merged is None:
        raise ConfigError(f"no kubeconfig found at {os.pathsep.join(map(str, paths))}")
    return merged


@attrs.frozen
class _Merged:
    """Named entries of one or more kubeconfig files, each remembering its file's directory."""

    current_context: str
    contexts: Mapping[str, Mapping[str, Any]]
    clusters: Mapping[str, tuple[Path, Mapping[str, Any]]]
    users: Mapping[str, tuple[Path, Mapping[str, Any]]]


def _read_yaml(path: Path) -> Mapping[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the kubeconfig {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        raise ConfigError(f"the kubeconfig {path} is not valid YAML") from None
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"the kubeconfig {path} is not a mapping")
    return data


def _merge(files: list[tuple[Path, Mapping[str, Any]]]) -> _Merged | None:
    """Merge like kubectl: the first file that names an entry (or the current context) wins."""
    if not files:
        return None
    current = ""
    contexts: dict[str, Mapping[str, Any]] = {}
    clusters: dict[str, tuple[Path, Mapping[str, Any]]] = {}
    users: dict[str, tuple[Path, Mapping[str, Any]]] = {}
    for path, data in files:
        current = current or _text(data.get("current-context"))
        base = path.parent
        for entry in _entries(data, "contexts"):
            contexts.setdefault(entry[0], entry[1])
        for name, body in _entries(data, "clusters"):
            clusters.setdefault(name, (base, body))
        for name, body in _entries(data, "users"):
            users.setdefault(name, (base, body))
    return _Merged(current, contexts, clusters, users)


def _entries(data: Mapping[str, Any], key: str) -> list[tuple[str, Mapping[str, Any]]]:
    inner = key[:-1]  # clusters -> cluster, users -> user, contexts -> context
    result = []
    for item in data.get(key) or []:
        if isinstance(item, Mapping) and isinstance(item.get("name"), str):
            body = item.get(inner)
            result.append((item["name"], body if isinstance(body, Mapping) else {}))
    return result


def _from_merged(merged: _Merged, context_name: str | None, *, run_exec: bool = False) -> Config:
    name = context_name or merged.current_context
    if not name:
        raise ConfigError("the kubeconfig has no current-context; name a context")
    if name not in merged.contexts:
        raise ConfigError(f"the kubeconfig has no context {name!r}")
    context = merged.contexts[name]
    cluster_name = _text(context.get("cluster"))
    if cluster_name not in merged.clusters:
        raise ConfigError(f"context {name!r} names the unknown cluster {cluster_name!r}")
    cluster_base, cluster = merged.clusters[cluster_name]
    server = _text(cluster.get("server"))
    if not server.startswith(("https://", "http://")):
        raise ConfigError(f"cluster {cluster_name!r} has no http(s) server URL")

    user_name = _text(context.get("user"))
    user_base, user = merged.users.get(user_name, (cluster_base, {}))
    if user_name and user_name not in merged.users:
        raise ConfigError(f"context {name!r} names the unknown user {user_name!r}")
    token: TokenProvider | None = None
    plugin = user.get("exec")
    if run_exec and isinstance(plugin, Mapping) and plugin:
        token = _exec_token(plugin, user_base, user_name)
    for unsupported, what in (
        ("exec", "exec credential plugins"),
        ("auth-provider", "auth providers"),
        ("username", "basic authentication"),
    ):
        if user.get(unsupported) and not (unsupported == "exec" and token is not None):
            raise ConfigError(f"user {user_name!r} uses {what}, which the manager does not support")

    if token is None and _text(user.get("token")):
        token = StaticToken(_text(user.get("token")))
    elif token is None and _text(user.get("tokenFile")):
        token = FileToken(_resolve(user_base, _text(user["tokenFile"])))

    return Config(
        server=server.rstrip("/"),
        token=token,
        client_certificate=_blob(user, "client-certificate", user_base),
        client_key=_blob(user, "client-key", user_base),
        certificate_authority=_blob(cluster, "certificate-authority", cluster_base),
        tls_server_name=_text(cluster.get("tls-server-name")) or None,
        insecure_skip_tls_verify=cluster.get("insecure-skip-tls-verify") is True,
        proxy_url=_text(cluster.get("proxy-url")) or None,
        namespace=_text(context.get("namespace")) or "default",
    )


def _exec_token(plugin: Mapping[str, Any], base: Path, user_name: str) -> ExecToken:
    command = _text(plugin.get("command"))
    if not command:
        raise ConfigError(f"user {user_name!r} has an exec plugin without a command")
    if os.sep in command and not Path(command).is_absolute():
        command = str(base / command)  # as client-go resolves it: next to the kubeconfig
    args = plugin.get("args") or []
    env = plugin.get("env") or []
    return ExecToken(
        command=command,
        args=tuple(str(a) for a in args if isinstance(a, str | int | float)),
        env=tuple(
            (str(e["name"]), str(e.get("value", "")))
            for e in env
            if isinstance(e, Mapping) and isinstance(e.get("name"), str)
        ),
        api_version=_text(plugin.get("apiVersion")) or "client.authentication.k8s.io/v1",
    )


def _blob(section: Mapping[str, Any], key: str, base: Path) -> bytes | None:
    """``key-data`` (base64, wins as in kubectl) or the file named by ``key``."""
    data = section.get(f"{key}-data")
    if isinstance(data, str) and data:
        try:
            return base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise ConfigError(f"{key}-data is not valid base64") from None
    file_name = _text(section.get(key))
    if not file_name:
        return None
    path = _resolve(base, file_name)
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {key} {path}: {exc.strerror}") from None


def _resolve(base: Path, name: str) -> Path:
    path = Path(name).expanduser()
    return path if path.is_absolute() else base / path


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _host_for_url(host: str) -> str:
    try:
        return f"[{host}]" if ipaddress.ip_address(host).version == 6 else host
    except ValueError:
        return host
