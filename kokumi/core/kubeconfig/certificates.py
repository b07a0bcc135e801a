"""The certificates and keys of a kubeconfig: decoded, parsed and matched, or refused by field.

A CA, client certificate or key that Argo CD or Go's TLS could not use would fail later, at a
connection, in words about TLS; read here with cryptography, each is refused naming its entry and
field, never the data.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Final

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa

from kokumi.core.kubeconfig.connection import Code, Entry, refuse

__all__ = ["certificate_authority", "client_certificate"]

_PRIVATE_KEY_PEM: Final = re.compile(rb"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")

_CERTIFICATE_PEM: Final = b"-----BEGIN CERTIFICATE-----"

_CURVES: Final = frozenset({"secp256r1", "secp384r1", "secp521r1"})  # those Go's TLS signs with


def _decode(value: str, owner: Entry, field: str, code: Code) -> bytes:
    """Base64 as client-go reads it: the standard alphabet, padded, line breaks ignored."""
    path = owner.path(field)
    try:
        data = base64.b64decode(value.replace("\r", "").replace("\n", ""), validate=True)
    except (binascii.Error, ValueError):
        refuse(
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
            refuse(code, f"{owner} has {field} encoded in base64 twice ({path}): decode it once")
    return data


def certificate_authority(value: str, owner: Entry) -> bytes:
    """The PEM bundle of ``certificate-authority-data``, or refused naming ``owner``; the reader
    calls it for each cluster it reads."""
    field = "certificate-authority-data"
    path = owner.path(field)
    code = Code.INVALID_CERTIFICATE_AUTHORITY
    data = _decode(value, owner, field, code)
    if _PRIVATE_KEY_PEM.search(data):
        refuse(
            code,
            f"{owner} has a private key in {field} ({path}): keep only the CA's certificates "
            "there, and replace the key, since it has been shared",
        )
    if _CERTIFICATE_PEM not in data:
        refuse(
            code,
            f"{owner} has {field} that holds no PEM certificate ({path}): put the base64 of the "
            "CA's PEM certificates there",
        )
    try:
        x509.load_pem_x509_certificates(data)
    except ValueError:
        refuse(
            code,
            f"{owner} has {field} with a certificate that does not parse ({path}): put the "
            "base64 of the CA's PEM certificates there",
        )
    return data


def client_certificate(
    certificate_data: str | None, key_data: str | None, owner: Entry
) -> tuple[bytes | None, bytes | None]:
    """The PEM certificate and key of a user, matched, or refused naming ``owner``; the reader
    calls it for each user it reads."""
    if certificate_data is None and key_data is None:
        return None, None
    if key_data is None:
        refuse(
            Code.INCOMPLETE_CLIENT_CERTIFICATE,
            f"{owner} has client-certificate-data but no client-key-data "
            f"({owner.path('client-key-data')}): add the key the certificate was issued for",
        )
    if certificate_data is None:
        refuse(
            Code.INCOMPLETE_CLIENT_CERTIFICATE,
            f"{owner} has client-key-data but no client-certificate-data "
            f"({owner.path('client-certificate-data')}): add the certificate issued for the key",
        )

    field = "client-certificate-data"
    code = Code.INVALID_CLIENT_CERTIFICATE
    certificate_pem = _decode(certificate_data, owner, field, code)
    if _CERTIFICATE_PEM not in certificate_pem:
        refuse(
            code,
            f"{owner} has {field} that holds no PEM certificate ({owner.path(field)}): put the "
            "base64 of the client's PEM certificate there",
        )
    try:
        # Like Go's tls.X509KeyPair: the first certificate is the client's, the rest its chain.
        leaf = x509.load_pem_x509_certificates(certificate_pem)[0]
        public_key = leaf.public_key()
    except (ValueError, UnsupportedAlgorithm):
        refuse(
            code,
            f"{owner} has {field} with a certificate that does not parse ({owner.path(field)}): "
            "put the base64 of the client's PEM certificate there",
        )

    field = "client-key-data"
    code = Code.INVALID_CLIENT_KEY
    path = owner.path(field)
    key_pem = _decode(key_data, owner, field, code)
    if not _PRIVATE_KEY_PEM.search(key_pem):
        refuse(
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
        refuse(
            code,
            f"{owner} has {field} that is encrypted ({path}): store the key unencrypted, e.g. "
            "from openssl pkey -in key.pem",
        )
    except (ValueError, UnsupportedAlgorithm):
        refuse(
            code,
            f"{owner} has {field} with a private key that does not parse ({path}): put the "
            "base64 of the client's PEM private key there",
        )
    _check_key_type(key, owner)
    if not _signs_for(key, public_key):
        refuse(
            Code.CLIENT_KEY_MISMATCH,
            f"{owner} has a client key that does not belong to its client certificate ({path}): "
            "use the key the certificate was issued for",
        )
    return certificate_pem, key_pem


def _check_key_type(key: object, owner: Entry) -> None:
    path = owner.path("client-key-data")
    if isinstance(key, rsa.RSAPrivateKey):
        if not 1024 <= key.key_size <= 8192:
            refuse(
                Code.INVALID_CLIENT_KEY,
                f"{owner} has an RSA client key of {key.key_size} bits ({path}): use one of "
                "1024 to 8192 bits, as Kubernetes clients accept",
            )
        return
    if isinstance(key, ec.EllipticCurvePrivateKey):
        if key.curve.name not in _CURVES:
            refuse(
                Code.INVALID_CLIENT_KEY,
                f"{owner} has an EC client key on a curve TLS clients do not sign with ({path}): "
                "use P-256, P-384 or P-521",
            )
        return
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return
    refuse(
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
