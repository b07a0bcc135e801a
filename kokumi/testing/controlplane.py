"""A local hub + spoke control plane: etcd, two kube-apiservers and their controller-managers.

The tests and ``kokumi demo`` need real API servers with RBAC and admission on; a mocked API server
would only confirm our own assumptions. The binaries are built from Go modules (the wrapper modules
under ``kokumi/testing/go/``) by :mod:`kokumi.testing.build`, which caches them; this module gives
each server its PKI, starts it and waits until it answers.

Everything here is synchronous on purpose: the control plane outlives many Trio runs (pytest-trio
starts one per test), and subprocesses need no event loop.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import datetime
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

import attrs
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from kokumi.testing.build import Binaries, ensure_binaries

__all__ = ["APIServer", "ControlPlane"]

# --- PKI --------------------------------------------------------------------------------


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@attrs.frozen
class CertificateAuthority:
    """A throwaway CA made at start; nothing of it is ever committed."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @classmethod
    def create(cls, name: str) -> CertificateAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=7))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )
        return cls(cert, key)

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(
        self,
        common_name: str,
        organizations: Sequence[str] = (),
        *,
        server_names: Sequence[str] = (),
        serving: bool = False,
    ) -> tuple[bytes, bytes]:
        """A leaf certificate and its key, as PEM: a client identity, or a serving certificate.

        ``serving`` without ``server_names`` makes a serving certificate with no subjectAltName,
        naming its host only in the CN as certificates did before Go's TLS ignored the CN: the
        one Kokumi must refuse as Argo CD does.
        """
        key = ec.generate_private_key(ec.SECP256R1())
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attributes))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=7))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        )
        if server_names:
            sans: list[x509.GeneralName] = []
            for name in server_names:
                try:
                    sans.append(x509.IPAddress(ipaddress.ip_address(name)))
                except ValueError:
                    sans.append(x509.DNSName(name))
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        if server_names or serving:
            usage = x509.oid.ExtendedKeyUsageOID.SERVER_AUTH
        else:
            usage = x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return cert.public_bytes(serialization.Encoding.PEM), _pem_key(key)


# --- processes --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Children die with the test run even when it is killed hard, so no server is left behind."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@attrs.define
class _Process:
    name: str
    argv: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        # The kernel's parent-death signal follows the *thread* that forked, not the process: a
        # server started from a worker thread (a test restarting the hub via trio.to_thread) would
        # be killed when that thread idles out. Only the main thread's children get it.
        on_main = threading.current_thread() is threading.main_thread()
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent if on_main else None,  # noqa: PLW1509
                # A Ctrl-C (or `timeout -s INT`) signals the whole process group: the servers
                # must not die under a manager that is still stopping, so only Python decides
                # when they stop.
                start_new_session=True,
            )

    def stop(self, timeout: float = 10.0) -> None:
        popen, self.popen = self.popen, None
        if popen is None or popen.poll() is not None:
            return
        popen.terminate()
        try:
            popen.wait(timeout)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()

    def check_alive(self) -> None:
        if self.popen is None or self.popen.poll() is not None:
            raise RuntimeError(f"{self.name} exited; its log:\n{tail(self.log_path)}")


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@attrs.define
class APIServer:
    """One kube-apiserver (hub or spoke) with its controller-manager and its own PKI."""

    name: str
    workdir: Path
    port: int
    ca: CertificateAuthority
    version: str
    apiserver: _Process
    controller_manager: _Process
    etcd_url: str

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_pem(self) -> bytes:
        return self.ca.pem

    @property
    def ca_file(self) -> Path:
        return self.workdir / "ca.crt"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    @property
    def log_path(self) -> Path:
        return self.apiserver.log_path

    def identity(self, user: str, groups: Sequence[str] = ()) -> tuple[bytes, bytes]:
        """A client certificate for ``user`` in ``groups``: RBAC tests mint as many as they need."""
        return self.ca.issue(user, groups)

    def kubeconfig_for(
        self, user: str, groups: Sequence[str] = (), path: Path | None = None
    ) -> Path:
        cert, key = self.identity(user, groups)
        if path is None:
            safe = re.sub(r"[^A-Za-z0-9_.-]", "_", user)
            path = self.workdir / f"user-{safe}-{os.urandom(3).hex()}.kubeconfig"
        path.write_text(_kubeconfig(self.name, self.url, self.ca_pem, user, cert, key))
        path.chmod(0o600)
        return path

    def ssl_context(self, user: str = "kokumi-admin", groups: Sequence[str] = ()) -> ssl.SSLContext:
        """A TLS context that trusts this server and presents a client certificate for ``user``."""
        context = ssl.create_default_context(cadata=self.ca_pem.decode())
        cert, key = self.identity(user, groups)
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "c").write_bytes(cert + key)
            context.load_cert_chain(Path(tmp) / "c")
        return context

    def wait_ready(self, timeout: float = 90.0) -> None:
        context = self.ssl_context("kokumi-admin", ["system:masters"])
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            self.apiserver.check_alive()
            try:
                with urllib.request.urlopen(  # noqa: S310 - a URL we built
                    f"{self.url}/readyz", context=context, timeout=5
                ) as response:
                    if response.status == 200:
                        return
            except Exception as exc:  # any failure means "not yet"
                last = str(exc)
            time.sleep(0.25)
        raise TimeoutError(f"{self.name} apiserver not ready after {timeout} s ({last})")

    def restart(self) -> None:
        """Stop and start the apiserver on the same port: for tests that must survive it."""
        self.apiserver.stop()
        self.apiserver.start()
        self.wait_ready()

    def stop(self) -> None:
        self.controller_manager.stop()
        self.apiserver.stop()


def _kubeconfig(name: str, url: str, ca: bytes, user: str, cert: bytes, key: bytes) -> str:
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": name, "cluster": {"server": url, "certificate-authority-data": b64(ca)}}
        ],
        "users": [
            {
                "name": user,
                "user": {"client-certificate-data": b64(cert), "client-key-data": b64(key)},
            }
        ],
        "contexts": [{"name": name, "context": {"cluster": name, "user": user}}],
        "current-context": name,
    }
    return json.dumps(document, indent=2)


@attrs.define
class ControlPlane:
    """etcd plus a hub and a spoke apiserver on loopback, each with its controller-manager."""

    workdir: Path
    binaries: Binaries
    etcd: _Process
    hub: APIServer
    spoke: APIServer
    _owns_workdir: bool = False

    @classmethod
    def start(cls, workdir: Path | None = None) -> ControlPlane:
        binaries = ensure_binaries()
        owns = workdir is None
        if workdir is None:
            # etcd on tmpfs: the tests write a lot and need none of it to survive.
            shm = "/dev/shm"  # noqa: S108 - a private mkdtemp below it
            base = shm if os.access(shm, os.W_OK) else None
            workdir = Path(tempfile.mkdtemp(prefix="kokumi-controlplane-", dir=base))
        workdir.mkdir(parents=True, exist_ok=True)
        client_port, peer_port = free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{client_port}"
        etcd = _Process(
            "etcd",
            [
                str(binaries.etcd),
                "--data-dir",
                str(workdir / "etcd"),
                "--listen-client-urls",
                etcd_url,
                "--advertise-client-urls",
                etcd_url,
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-cluster",
                f"default=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync",
                "--log-level",
                "warn",
            ],
            workdir / "etcd.log",
        )
        etcd.start()
        servers: list[APIServer] = []
        try:
            _wait_etcd(etcd, etcd_url)
            for name in ("hub", "spoke"):
                servers.append(_prepare_apiserver(name, workdir / name, binaries, etcd_url))
            for server in servers:
                server.apiserver.start()
            for server in servers:
                server.wait_ready()
                server.controller_manager.start()
        except BaseException:
            for server in servers:
                server.stop()
            etcd.stop()
            raise
        return cls(workdir, binaries, etcd, servers[0], servers[1], owns)

    def stop(self) -> None:
        for server in (self.hub, self.spoke):
            server.stop()
        self.etcd.stop()
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def logs(self) -> Iterator[tuple[str, Path]]:
        yield "etcd", self.etcd.log_path
        for server in (self.hub, self.spoke):
            yield f"{server.name} kube-apiserver", server.apiserver.log_path
            yield f"{server.name} kube-controller-manager", server.controller_manager.log_path

    def __enter__(self) -> ControlPlane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _wait_etcd(etcd: _Process, url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        etcd.check_alive()
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:  # noqa: S310
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"etcd not healthy after {timeout} s:\n{tail(etcd.log_path)}")


def _prepare_apiserver(name: str, workdir: Path, binaries: Binaries, etcd_url: str) -> APIServer:
    workdir.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority.create(f"kokumi-{name}-ca")
    (workdir / "ca.crt").write_bytes(ca.pem)
    (workdir / "ca.key").write_bytes(_pem_key(ca.key))
    serving_cert, serving_key = ca.issue(
        f"kokumi-{name}-apiserver",
        server_names=["127.0.0.1", "localhost", "kubernetes", "kubernetes.default.svc"],
    )
    (workdir / "serving.crt").write_bytes(serving_cert)
    (workdir / "serving.key").write_bytes(serving_key)
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (workdir / "sa.key").write_bytes(_pem_key(sa_key))
    (workdir / "sa.pub").write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    for path in workdir.iterdir():
        path.chmod(0o600)
    port = free_port()
    apiserver = _Process(
        f"{name} kube-apiserver",
        [
            str(binaries.kube_apiserver),
            f"--etcd-servers={etcd_url}",
            f"--etcd-prefix=/{name}/registry",
            f"--secure-port={port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--tls-cert-file={workdir / 'serving.crt'}",
            f"--tls-private-key-file={workdir / 'serving.key'}",
            f"--client-ca-file={workdir / 'ca.crt'}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--authorization-mode=RBAC",
            "--allow-privileged=true",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={workdir / 'sa.pub'}",
            f"--service-account-signing-key-file={workdir / 'sa.key'}",
            "--endpoint-reconciler-type=none",
            "--anonymous-auth=true",
            "--v=1",
        ],
        workdir / "kube-apiserver.log",
    )
    admin_cert, admin_key = ca.issue("kokumi-admin", ["system:masters"])
    url = f"https://127.0.0.1:{port}"
    (workdir / "admin.kubeconfig").write_text(
        _kubeconfig(name, url, ca.pem, "kokumi-admin", admin_cert, admin_key)
    )
    # In system:masters: with one shared identity (no per-controller ServiceAccounts), the
    # namespace controller needs rights the bootstrap role of this user lacks (deletecollection).
    kcm_cert, kcm_key = ca.issue("system:kube-controller-manager", ["system:masters"])
    (workdir / "controller-manager.kubeconfig").write_text(
        _kubeconfig(name, url, ca.pem, "system:kube-controller-manager", kcm_cert, kcm_key)
    )
    controller_manager = _Process(
        f"{name} kube-controller-manager",
        [
            str(binaries.kube_controller_manager),
            f"--kubeconfig={workdir / 'controller-manager.kubeconfig'}",
            f"--authentication-kubeconfig={workdir / 'controller-manager.kubeconfig'}",
            f"--authorization-kubeconfig={workdir / 'controller-manager.kubeconfig'}",
            "--controllers=garbage-collector-controller,namespace-controller,"
            "serviceaccount-token-controller,serviceaccount-controller,"
            "clusterrole-aggregation-controller",
            f"--service-account-private-key-file={workdir / 'sa.key'}",
            f"--root-ca-file={workdir / 'ca.crt'}",
            "--use-service-account-credentials=false",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            "--v=1",
        ],
        workdir / "kube-controller-manager.log",
    )
    return APIServer(
        name=name,
        workdir=workdir,
        port=port,
        ca=ca,
        version=binaries.kubernetes_version,
        apiserver=apiserver,
        controller_manager=controller_manager,
        etcd_url=etcd_url,
    )
