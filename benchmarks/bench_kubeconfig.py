"""What parsing a kubeconfig costs, in µs per call.

Kokumi parses a Cluster's kubeconfig on the actor's Trio thread whenever its Secret changes, so the
cost decides whether parsing needs a worker thread. Run from the repository root:

    .venv/bin/python benchmarks/bench_kubeconfig.py

Each figure is the best and the median of seven rounds of as many calls as fill 0.2 s.
"""

from __future__ import annotations

import base64
import datetime
import functools
import json
import platform
import statistics
import timeit
from collections.abc import Callable

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes
from cryptography.x509.oid import NameOID

from kokumi.core.kubeconfig.connection import Connection
from kokumi.core.kubeconfig.reader import minimise, parse

TOKEN = "eyJhbGciOiJSUzI1NiIsImtpZCI6Imtva3VtaSJ9." + "x" * 700 + ".signature"  # a ServiceAccount's


def _certificate(
    key: CertificateIssuerPrivateKeyTypes,
    name: str,
    issuer: tuple[x509.Certificate, CertificateIssuerPrivateKeyTypes] | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    issuer_name, signer = (subject, key) if issuer is None else (issuer[0].subject, issuer[1])
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
        .sign(signer, hashes.SHA256())
    )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _pem(key: CertificateIssuerPrivateKeyTypes) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def kubeconfigs() -> dict[str, str]:
    """The kubeconfigs measured: the spec's (a token and a kubeadm-like RSA CA) and variants."""
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca = _certificate(ca_key, "kubernetes")
    ca_data = _b64(ca.public_bytes(serialization.Encoding.PEM))
    users: dict[str, dict[str, object]] = {"token": {"token": TOKEN}}
    for kind, key in (
        ("ec", ec.generate_private_key(ec.SECP256R1())),
        ("rsa", rsa.generate_private_key(public_exponent=65537, key_size=2048)),
    ):
        certificate = _certificate(key, f"kokumi-{kind}", (ca, ca_key))
        users[kind] = {
            "client-certificate-data": _b64(certificate.public_bytes(serialization.Encoding.PEM)),
            "client-key-data": _b64(_pem(key)),
        }

    def document(user: dict[str, object], others: int = 0) -> dict[str, object]:
        names = ["spoke"] + [f"other-{i}" for i in range(others)]
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": name,
                    "cluster": {
                        "server": f"https://{name}.example:6443",
                        "certificate-authority-data": ca_data,
                    },
                }
                for name in names
            ],
            "contexts": [
                {"name": name, "context": {"cluster": name, "user": name}} for name in names
            ],
            "current-context": "spoke",
            "preferences": {},
            "users": [{"name": name, "user": user} for name in names],
        }

    def as_yaml(value: object) -> str:
        # A copy with nothing shared: a shared object would be written as an anchor and its
        # aliases, which the reader refuses.
        return yaml.safe_dump(json.loads(json.dumps(value)), sort_keys=False, width=1 << 20)

    return {
        "token + CA (the spec's kubeconfig), YAML": as_yaml(document(users["token"])),
        "token + CA, JSON": json.dumps(document(users["token"]), indent=2),
        "EC P-256 client certificate + CA, YAML": as_yaml(document(users["ec"])),
        "RSA 2048 client certificate + CA, YAML": as_yaml(document(users["rsa"])),
        "token + CA among 20 contexts, YAML": as_yaml(document(users["token"], others=19)),
    }


def measure(call: Callable[[], object]) -> tuple[float, float]:
    """(best, median) µs per call."""
    timer = timeit.Timer(call)
    number = max(1, int(timer.autorange()[0] * 0.4))  # autorange fills 0.2 s at most twice over
    rounds = [seconds / number * 1e6 for seconds in timer.repeat(repeat=7, number=number)]
    return min(rounds), statistics.median(rounds)


def main() -> None:
    print(f"Python {platform.python_version()} on {platform.machine()}, libyaml: ", end="")
    print("yes" if getattr(yaml, "__with_libyaml__", False) else "no")
    print(f"{'kubeconfig':<44} {'bytes':>6} {'parse best':>11} {'median':>9}")
    texts = kubeconfigs()
    for name, text in texts.items():
        assert isinstance(parse(text), Connection), name
        best, median = measure(functools.partial(parse, text))
        print(f"{name:<44} {len(text):>6} {best:>9.0f}µs {median:>7.0f}µs")
    typical = next(iter(texts.values()))
    best, median = measure(functools.partial(minimise, typical))
    print(f"{'minimise, token + CA':<44} {len(typical):>6} {best:>9.0f}µs {median:>7.0f}µs")


if __name__ == "__main__":
    main()
