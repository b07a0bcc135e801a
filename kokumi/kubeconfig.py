"""A Cluster's kubeconfig becomes a Connection, or a precise Refusal.

Work in progress: the parser lands with the kubeconfig rules; the value classes are fixed here first
because the probe, the registry and Argo CD's Secret all read them.
"""

from __future__ import annotations

import attrs


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
    proxy_url: str | None = None


@attrs.frozen
class Refusal:
    """Why a kubeconfig cannot be used: ``code`` is fine-grained, ``message`` one line with the fix."""

    code: str
    message: str
