"""One way to turn PEM bytes into a TLS client context, for every connection Kokumi opens.

The manager's own connection and the check of each Cluster must trust, present and verify exactly
the same way, so the context is built here once and nowhere else.
"""

from __future__ import annotations

import contextlib
import os
import re
import ssl
import tempfile

from .errors import ConfigError

__all__ = ["ssl_context"]


def ssl_context(
    certificate_authority: bytes | None,
    client_certificate: bytes | None,
    client_key: bytes | None,
    insecure_skip_tls_verify: bool,
) -> ssl.SSLContext:
    """A client context trusting only ``certificate_authority`` (the system store without it).

    ``insecure_skip_tls_verify`` turns verification off entirely, as kubectl's option does.
    Otherwise the server's name is verified as Go verifies it, against the subjectAltName only.
    Python's ``ssl`` loads a client key only from a path, so the PEM goes to an anonymous memory
    file for the one ``load_cert_chain`` call (a private 0600 file in a fresh temporary
    directory, removed right after, where there is no ``memfd_create``). The texts of
    :class:`ConfigError` name what is unusable, never the PEM itself.
    """
    if certificate_authority is not None:
        if not certificate_authority.strip():
            # ``cadata=""`` would silently fall back to the system store: refuse it instead.
            raise ConfigError("the certificate authority is empty")
        try:
            context = ssl.create_default_context(cadata=certificate_authority.decode("ascii"))
        except (ssl.SSLError, UnicodeDecodeError, ValueError) as exc:
            raise ConfigError(f"the certificate authority is not valid PEM: {_why(exc)}") from None
    else:
        context = ssl.create_default_context()
    # Go's TLS (client-go, kubectl, Argo CD) matches the host against the subjectAltName only
    # and never the CN; Python's falls back to the CN of a certificate without a DNS name
    # there. Kokumi must refuse what Argo CD refuses, or a Cluster is Ready that Argo CD
    # cannot connect to.
    context.hostname_checks_common_name = False
    if insecure_skip_tls_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if (client_certificate is None) != (client_key is None):
        raise ConfigError("a client certificate needs its key, and a key its certificate")
    if client_certificate is not None and client_key is not None:
        pem = client_certificate.rstrip(b"\n") + b"\n" + client_key
        try:
            _load_chain(context, pem)
        except ssl.SSLError as exc:
            raise ConfigError(f"the client certificate or key is unusable: {_why(exc)}") from None
    return context


def _load_chain(context: ssl.SSLContext, pem: bytes) -> None:
    """``load_cert_chain`` from memory where Linux allows it, else from a private temporary file.

    An anonymous memory file (``memfd_create``) has a path only through ``/proc/self/fd`` and
    vanishes with its descriptor, so the key never reaches a filesystem: a read-only root with
    no writable ``/tmp`` works, and nothing is left behind if the process dies mid-way.
    """
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        fd = os.memfd_create("kokumi-tls", os.MFD_CLOEXEC)
        try:
            view = memoryview(pem)
            while view:
                view = view[os.write(fd, view) :]
            context.load_cert_chain(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="kokumi-tls-") as directory:
        path = os.path.join(directory, "client.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(pem)
            context.load_cert_chain(path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def _why(exc: Exception) -> str:
    """OpenSSL's own words (``no start line``, ``PEM lib``) without the C source location.

    OpenSSL never quotes the input, so these texts are safe to show; the PEM itself never is.
    """
    if isinstance(exc, UnicodeDecodeError):
        return "it is not ASCII text"
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    text = re.sub(r"\s*\(_ssl\.c:\d+\)$", "", text)
    text = re.sub(r"^\[[A-Z0-9_]+\]\s*", "", text)
    return text or type(exc).__name__
