"""Shared Hypothesis strategies and test PKI.

A plain module of functions, so that every test module can take what it needs. Keys and certificates
are made when a test first asks for them and kept for the session: no private key is ever committed,
and none is generated twice.
"""

from __future__ import annotations

import base64
import copy
import datetime
import functools
import json
import random
from collections.abc import Callable
from typing import Any

import hypothesis
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import (
    CertificateIssuerPrivateKeyTypes,
    PrivateKeyTypes,
)
from cryptography.x509.oid import NameOID
from hypothesis import strategies as st

from kokumi.core.kubeconfig.connection import Connection

# --- PKI ----------------------------------------------------------------------------------------

KEY_KINDS = ("ec", "rsa", "ed25519")


def new_key(kind: str = "ec") -> CertificateIssuerPrivateKeyTypes:
    """A fresh private key; EC by default because RSA takes 50 ms to generate."""
    if kind == "ec":
        return ec.generate_private_key(ec.SECP256R1())
    if kind == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    if kind == "ed25519":
        return ed25519.Ed25519PrivateKey.generate()
    if kind == "ed448":
        return ed448.Ed448PrivateKey.generate()
    if kind == "secp256k1":
        return ec.generate_private_key(ec.SECP256K1())
    raise ValueError(kind)


def certificate(
    key: CertificateIssuerPrivateKeyTypes,
    common_name: str,
    *,
    issuer: tuple[x509.Certificate, CertificateIssuerPrivateKeyTypes] | None = None,
    ca: bool = False,
) -> x509.Certificate:
    """A certificate for ``key``: self-signed, or signed by ``issuer`` (certificate, key)."""
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    issuer_name, signing_key = (subject, key) if issuer is None else (issuer[0].subject, issuer[1])
    algorithm = (
        None
        if isinstance(signing_key, ed25519.Ed25519PrivateKey | ed448.Ed448PrivateKey)
        else hashes.SHA256()
    )
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .sign(signing_key, algorithm)
    )


def certificate_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def key_pem(key: PrivateKeyTypes, *, password: bytes | None = None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.NoEncryption()
        if password is None
        else serialization.BestAvailableEncryption(password)
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )


@functools.cache
def _ca(index: int) -> tuple[x509.Certificate, CertificateIssuerPrivateKeyTypes]:
    key = new_key("ec")
    return certificate(key, f"kokumi-test-ca-{index}", ca=True), key


def ca_pem(index: int = 0) -> bytes:
    """The PEM certificate of test CA ``index`` (0 signs the client certificates)."""
    return certificate_pem(_ca(index)[0])


def ca_bundle_pem() -> bytes:
    return ca_pem(0) + ca_pem(1)


@functools.cache
def client_pair(kind: str = "ec", index: int = 0) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) of a client, signed by CA 0; ``index`` gives another client."""
    key = new_key(kind)
    cert = certificate(key, f"kokumi-{kind}-{index}", issuer=_ca(0))
    return certificate_pem(cert), key_pem(key)


@functools.cache
def lone_key_pem(kind: str) -> bytes:
    """An unencrypted key of ``kind`` that no certificate belongs to."""
    return key_pem(new_key(kind))


@functools.cache
def encrypted_key_pem() -> bytes:
    return key_pem(new_key("ec"), password=b"kokumi-test")


@functools.cache
def small_rsa_key_pem(bits: int = 512) -> bytes:
    """An RSA key smaller than any library will generate, built from two primes of its own."""
    rng = random.Random(bits)
    e = 65537
    p, q = _prime(bits // 2, rng, e), _prime(bits // 2, rng, e)
    n = p * q
    d = pow(e, -1, (p - 1) * (q - 1))
    numbers = rsa.RSAPrivateNumbers(
        p, q, d, d % (p - 1), d % (q - 1), pow(q, -1, p), rsa.RSAPublicNumbers(e, n)
    )
    return key_pem(numbers.private_key(unsafe_skip_rsa_key_validation=True))


def _prime(bits: int, rng: random.Random, e: int) -> int:
    while True:
        candidate = rng.getrandbits(bits) | (3 << (bits - 2)) | 1  # top two bits: n has 2*bits
        if candidate % e != 1 and _probably_prime(candidate):
            return candidate


def _probably_prime(n: int) -> bool:
    small = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)
    if any(n % p == 0 for p in small):
        return n in small
    d, s = n - 1, 0
    while d % 2 == 0:
        d, s = d // 2, s + 1
    for a in small:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = pow(x, 2, n)
            if x == n - 1:
                break
        else:
            return False
    return True


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def pem_body_lines(pem: bytes) -> list[str]:
    """The base64 lines of a PEM block long enough to be recognisable if a message quoted them."""
    return [
        line
        for line in pem.decode("ascii").splitlines()
        if not line.startswith("-----") and len(line) >= 40
    ]


# --- kubeconfigs --------------------------------------------------------------------------------

SERVER = "https://spoke.example:6443"
TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJrb2t1bWkifQ.c2lnbmF0dXJlLW9mLWtva3VtaQ"


def kubeconfig(
    *,
    context: str = "spoke",
    cluster_name: str = "spoke",
    user_name: str = "kokumi",
    cluster: dict[str, Any] | None = None,
    user: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A valid kubeconfig as a mapping, by default the one the spec's commands write."""
    if cluster is None:
        cluster = {"server": SERVER, "certificate-authority-data": b64(ca_pem())}
    if user is None:
        user = {"token": TOKEN}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": cluster}],
        "contexts": [{"name": context, "context": {"cluster": cluster_name, "user": user_name}}],
        "current-context": context,
        "preferences": {},
        "users": [{"name": user_name, "user": user}],
    }


_BaseDumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # the pure one: 10 ms a document


class _Dumper(_BaseDumper):  # type: ignore[misc]
    """Writes a value shared by two places out twice: Kokumi refuses YAML's anchors."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump(document: object, style: str = "yaml") -> str:
    if style == "json":
        return json.dumps(document, indent=2)
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, width=1 << 20)


def secrets_of(connection: Connection) -> list[str]:
    """Every piece of a Connection that a message must never show."""
    secrets: list[str] = []
    if connection.token is not None:
        secrets.append(connection.token)
    for pem in (connection.client_key, connection.client_certificate):
        if pem is not None:
            secrets += [b64(pem), pem.decode("ascii"), *pem_body_lines(pem)]
    return secrets


# --- strategies ---------------------------------------------------------------------------------


@functools.cache  # a strategy is immutable; building it anew costs more than drawing
def names() -> st.SearchStrategy[str]:
    """Kubeconfig entry names; no dots, so a token (which has them) can never be one."""
    return st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=24)


_B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


@functools.cache
def tokens() -> st.SearchStrategy[str]:
    """Bearer tokens shaped like a ServiceAccount's JWT: long, and with dots no name has."""
    part = st.text(alphabet=_B64URL, min_size=8, max_size=40)
    return st.builds(lambda a, b, c: f"eyJ{a}.{b}.{c}", part, part, part)


@functools.cache
def servers() -> st.SearchStrategy[str]:
    host = st.sampled_from(["spoke.example", "10.0.0.7", "[fd00::7]", "localhost", "api.k8s.local"])
    port = st.sampled_from(["", ":6443", ":443", ":8443"])
    path = st.sampled_from(["", "/", "/k8s/clusters/c-m-1234", "/k8s/clusters/c-m-1234/"])
    scheme = st.sampled_from(["https", "https", "http"])
    return st.builds(lambda s, h, p, pa: f"{s}://{h}{p}{pa}", scheme, host, port, path)


@functools.cache
def proxy_urls() -> st.SearchStrategy[str]:
    return st.sampled_from(
        [
            "http://proxy.example:3128",
            "https://proxy.example",
            "socks5://127.0.0.1:1080",
            "http://user:secret@proxy.example:3128",
        ]
    )


@st.composite
def valid_kubeconfigs(draw: st.DrawFn) -> tuple[dict[str, Any], Connection]:
    """A kubeconfig Kokumi accepts, with the Connection it must give.

    Besides the entries of the current context it may hold other entries with anything in them
    (exec plugins, file paths, garbage), which must not matter.
    """
    context, cluster_name, user_name = draw(st.lists(names(), min_size=3, max_size=3, unique=True))
    server = draw(servers())
    cluster: dict[str, Any] = {"server": server}
    user: dict[str, Any] = {}
    credential = draw(st.sampled_from(["token", "certificate", "both"]))
    token = draw(tokens()) if credential in ("token", "both") else None
    certificate = key = None
    if token is not None:
        user["token"] = token
    if credential in ("certificate", "both"):
        certificate, key = client_pair(draw(st.sampled_from(KEY_KINDS)))
        user["client-certificate-data"] = b64(certificate)
        user["client-key-data"] = b64(key)
    trust = draw(st.sampled_from(["system", "ca", "bundle", "insecure"]))
    authority = {"ca": ca_pem(), "bundle": ca_bundle_pem()}.get(trust)
    if authority is not None:
        cluster["certificate-authority-data"] = b64(authority)
    if trust == "insecure":
        cluster["insecure-skip-tls-verify"] = True
    elif draw(st.booleans()):
        cluster["insecure-skip-tls-verify"] = False
    tls_server_name = draw(st.none() | st.sampled_from(["spoke.example", "kubernetes.default"]))
    if tls_server_name is not None:
        cluster["tls-server-name"] = tls_server_name
    proxy_url = draw(st.none() | proxy_urls())
    if proxy_url is not None:
        cluster["proxy-url"] = proxy_url
    document = kubeconfig(
        context=context, cluster_name=cluster_name, user_name=user_name, cluster=cluster, user=user
    )
    if draw(st.booleans()):
        document["contexts"][0]["context"]["namespace"] = draw(names())
    for plural, decoy in draw(st.lists(st.sampled_from(_DECOYS), max_size=3)):
        # Upper case and a prefix: never the name of the entry in use (names are lower case, and
        # a digits-only name is its own upper case).
        document[plural].append({"name": "DECOY-" + draw(names()).upper(), plural[:-1]: decoy})
    for field in draw(
        st.lists(st.sampled_from(["apiVersion", "kind", "preferences"]), unique=True)
    ):
        del document[field]
    expected = Connection(
        server=server,
        token=token,
        client_certificate=certificate,
        client_key=key,
        certificate_authority=authority,
        tls_server_name=tls_server_name,
        insecure_skip_tls_verify=trust == "insecure",
        proxy_url=proxy_url,
    )
    return document, expected


_DECOYS: list[tuple[str, object]] = [
    ("users", {"exec": {"command": "aws", "apiVersion": "client.authentication.k8s.io/v1"}}),
    ("users", {"username": "admin", "password": "hunter2"}),
    ("users", "not even a mapping"),
    ("clusters", {"certificate-authority": "/etc/ca.crt", "server": "ftp://nowhere"}),
    ("clusters", {"extensions": [{"name": "x", "extension": {}}]}),
    ("contexts", {"cluster": "missing", "user": 7}),
]


@functools.cache
def yaml_values() -> st.SearchStrategy[object]:
    """Anything YAML or JSON can hold, shaped a little towards kubeconfigs' keys."""
    keys = st.sampled_from(_KUBECONFIG_KEYS) | st.text(max_size=8)
    scalars = (
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=20)
        | st.sampled_from(["", "v1", "Config", SERVER, "spoke", "kokumi", "~", "yes"])
    )
    return st.recursive(
        scalars,
        lambda children: (
            st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=5)
        ),
        max_leaves=25,
    )


_KUBECONFIG_KEYS = [
    "apiVersion",
    "kind",
    "clusters",
    "contexts",
    "users",
    "current-context",
    "preferences",
    "extensions",
    "name",
    "cluster",
    "context",
    "user",
    "server",
    "certificate-authority",
    "certificate-authority-data",
    "insecure-skip-tls-verify",
    "tls-server-name",
    "proxy-url",
    "token",
    "tokenFile",
    "client-certificate",
    "client-certificate-data",
    "client-key",
    "client-key-data",
    "username",
    "password",
    "exec",
    "auth-provider",
    "as",
    "as-groups",
    "namespace",
]

# Keys whose values are names: copying a token there would make the token a name, which messages
# quote by design.
_NAME_KEYS = frozenset({"name", "cluster", "user", "context", "current-context"})


def _interesting_values(document: dict[str, Any]) -> st.SearchStrategy[object]:
    """Replacement values: arbitrary ones, the empty ones kubectl treats as absent, and the
    document's own secrets in the wrong place."""
    own = [
        value
        for _, key, value in _leaves(document)
        if key not in _NAME_KEYS and isinstance(value, str)
    ]
    return _replacements() | st.sampled_from(own) if own else _replacements()


@functools.cache
def _replacements() -> st.SearchStrategy[object]:
    near_miss = [
        " " + TOKEN,
        "line\nbreak",
        "https://user:pw@spoke.example",
        "https://spoke.example?x=1",
        "spoke.example:6443",
        b64(b"not a pem"),
        b64(b64(ca_pem()).encode()),
        b64(lone_key_pem("ec")),
        b64(encrypted_key_pem()),
        b64(client_pair("ec", 1)[0]),
        b64(ca_pem() + lone_key_pem("ec")),
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        # and valid ones, which may land where they fit
        SERVER,
        TOKEN,
        b64(ca_pem()),
        *map(b64, client_pair("ec")),
        "socks5://proxy.example:1080",
    ]
    return (
        yaml_values()
        | st.sampled_from([None, "", [], {}, True, False, 0])
        | st.sampled_from(near_miss)
    )


def _leaves(
    node: object, path: tuple[object, ...] = ()
) -> list[tuple[tuple[object, ...], Any, Any]]:
    """(path to the container, key, value) of every value in the tree, containers included."""
    found: list[tuple[tuple[object, ...], Any, Any]] = []
    items: list[tuple[Any, Any]] = []
    if isinstance(node, dict):
        items = list(node.items())
    elif isinstance(node, list):
        items = list(enumerate(node))
    for key, value in items:
        found.append((path, key, value))
        found += _leaves(value, (*path, key))
    return found


def _get(document: object, path: tuple[object, ...]) -> object:
    try:
        return _container(document, path)
    except (KeyError, IndexError, TypeError):
        return None


def _container(document: object, path: tuple[object, ...]) -> Any:
    node: Any = document
    for key in path:
        node = node[key]
    return node


# Where the current context's cluster and user are, unless an edit moved them.
_CURRENT_BODIES = (("clusters", 0, "cluster"), ("users", 0, "user"))


@st.composite
def _mutate(draw: st.DrawFn, document: dict[str, Any]) -> dict[str, Any]:
    document = copy.deepcopy(document)
    places = _leaves(document)
    if draw(st.booleans()):
        # Half the edits go to the current cluster and user, where most of the checks are.
        focused = [p for p in places if p[0][:3] in _CURRENT_BODIES]
        places = focused or places
    kind = draw(st.sampled_from(["delete", "replace", "add", "add", "duplicate"]))
    if kind == "add" or not places:
        containers = [document] + [v for _, _, v in places if isinstance(v, dict)]
        containers += [
            body for path in _CURRENT_BODIES if isinstance(body := _get(document, path), dict)
        ]
        target = draw(st.sampled_from(containers))
        key = draw(st.sampled_from(_KUBECONFIG_KEYS))
        if key in _NAME_KEYS:
            target[key] = draw(_name_values())
        else:
            target[key] = draw(_interesting_values(document))
        return document
    path, key, value = draw(st.sampled_from(places))
    container = _container(document, path)
    if kind == "delete":
        del container[key]
    elif kind == "duplicate" and isinstance(container, list):
        container.append(copy.deepcopy(value))
    elif key in _NAME_KEYS:
        container[key] = draw(_name_values())
    else:
        container[key] = draw(_interesting_values(document))
    return document


@functools.cache
def kubeconfig_like_values() -> st.SearchStrategy[object]:
    """Arbitrary values in a kubeconfig's shape: its keys, entries with names that meet, and in
    the bodies anything from garbage to a valid token or certificate."""
    name = st.sampled_from(["spoke", "kokumi", ""]) | yaml_values()
    body = st.dictionaries(st.sampled_from(_KUBECONFIG_KEYS), _replacements(), max_size=6)
    context = st.fixed_dictionaries(
        {}, optional={"cluster": name, "user": name, "extensions": yaml_values()}
    )
    entry = st.fixed_dictionaries(
        {"name": name}, optional={"cluster": body, "user": body, "context": context}
    )
    entries = st.lists(entry, max_size=3) | yaml_values()
    return st.fixed_dictionaries(
        {},
        optional={
            "apiVersion": st.just("v1") | yaml_values(),
            "kind": st.just("Config") | yaml_values(),
            "clusters": entries,
            "contexts": entries,
            "users": entries,
            "current-context": name,
            "preferences": yaml_values(),
            "extensions": yaml_values(),
        },
    )


@functools.cache
def _name_values() -> st.SearchStrategy[object]:
    return yaml_values() | names()


_TEXT_MUTATIONS: dict[str, Callable[[str, int, str], str | bytes]] = {
    "none": lambda text, at, ch: text,
    "truncate": lambda text, at, ch: text[:at],
    "insert": lambda text, at, ch: text[:at] + ch + text[at:],
    "drop": lambda text, at, ch: text[:at] + text[at + 1 :],
    "latin1": lambda text, at, ch: (text[:at] + ch + text[at:]).encode("latin-1", "replace"),
}


@st.composite
def mutated_kubeconfigs(draw: st.DrawFn) -> tuple[str | bytes, list[str]]:
    """A valid kubeconfig after a few random edits, as text, with the secrets it started from.

    The edits are those people make: a deleted or duplicated entry, a value of the wrong type or
    in the wrong place, a key of a mechanism Kokumi refuses, a text cut short or with a stray
    character, or the wrong encoding.
    """
    document, connection = draw(valid_kubeconfigs())
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        document = draw(_mutate(document))
    text = dump(document, draw(st.sampled_from(["yaml", "json"])))
    mutation = draw(st.sampled_from(["none"] * 4 + sorted(_TEXT_MUTATIONS)))
    at = draw(st.integers(min_value=0, max_value=len(text)))
    character = draw(st.sampled_from(["\t", ":", "-", " ", "{", "'", '"', "\n", "\x00", "é", "&"]))
    mutated = _TEXT_MUTATIONS[mutation](text, at, character)
    if isinstance(mutated, str) and draw(st.booleans()):
        mutated = mutated.encode("utf-8")
    return mutated, secrets_of(connection)


# --- Argo CD Secrets, the ownership table, an Environment's targets ----------------------------
# Imported where used: these lines were appended to the module and its head belongs to others.


@functools.cache
def cluster_refs() -> st.SearchStrategy[ClusterRef]:
    """Clusters by namespace and name, as label values allow them: at most 63 characters."""
    from kokumi.core.registry.ownership import ClusterRef

    label = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\Z")
    return st.builds(ClusterRef, namespace=label, name=label)


@functools.cache
def connections() -> st.SearchStrategy[Connection]:
    """Any Connection the kubeconfig parser could give, empty fields and odd bytes included.

    Never the in-cluster server: no Kubeconfig Cluster may register it.
    """
    pems = st.sampled_from([ca_pem(), ca_bundle_pem(), *client_pair()]) | st.binary(max_size=64)
    server = (servers() | st.sampled_from(["https://spoke.example:6443//"])).filter(
        lambda url: url.rstrip("/") != "https://kubernetes.default.svc"
    )
    return st.builds(
        Connection,
        server=server,
        token=st.none() | tokens() | st.text(max_size=20),
        client_certificate=st.none() | pems,
        client_key=st.none() | pems,
        certificate_authority=st.none() | pems,
        tls_server_name=st.none() | st.sampled_from(["spoke.example", "kubernetes.default", ""]),
        insecure_skip_tls_verify=st.booleans(),
        proxy_url=st.none() | proxy_urls(),
    )


@functools.cache
def selected_clusters() -> st.SearchStrategy[SelectedCluster]:
    """Clusters an Environment selects, with few names and servers so that they collide."""
    from kokumi.core.environments.targets import SelectedCluster
    from kokumi.core.registry.ownership import IN_CLUSTER_SERVER

    return st.builds(
        SelectedCluster,
        name=st.from_regex(r"\A[a-e][a-z0-9]{0,3}\Z"),
        connection=st.sampled_from(["Kubeconfig", "InCluster"]),
        ready=st.booleans(),
        reason=st.sampled_from(["Ready", "Unreachable", "ClusterConflict", "InvalidKubeconfig"]),
        server=st.none()
        | st.sampled_from(
            ["https://a.example:6443", "https://a.example:6443/", "https://b.example"]
        )
        | st.just(IN_CLUSTER_SERVER),
        message=st.sampled_from(["", "dial tcp: i/o timeout", "two\nlines"]),
    )


from typing import TYPE_CHECKING  # noqa: E402 - appended section, see above

if TYPE_CHECKING:
    from kokumi.core.environments.targets import SelectedCluster
    from kokumi.core.registry.ownership import ClusterRef


def examples(full: int) -> int:
    """A test's own example count in the full loop; at most the fast loop's 25 in ``nox -s unit``.

    A count set on a test outranks the profile, so without this the fast loop would still run a
    thousand examples where a test asks for them.
    """
    if hypothesis.settings.get_current_profile_name() == "unit":
        return min(full, hypothesis.settings().max_examples)
    return full


# --- hostile YAML: what costs a parser time or memory -------------------------------------------


@st.composite
def hostile_kubeconfigs(draw: st.DrawFn) -> str:
    """A valid kubeconfig's YAML with one of YAML's costly extras spliced in.

    Aliases and anchors (the billion laughs), merge keys (which copy, and multiply), base-60
    integers (1:1:1:..., whose conversion is quadratic), and scalars as large as a Secret allows.
    """
    document, _ = draw(valid_kubeconfigs())
    # The extras bring preferences of their own: a second one would be refused as a repeated
    # key, before the parser ever reached an extra spliced in after it.
    document.pop("preferences", None)
    text = dump(document, "yaml")
    kind = draw(st.sampled_from(["alias", "merge", "sexagesimal", "huge", "numbers"]))
    levels = draw(st.integers(min_value=1, max_value=9))
    width = draw(st.integers(min_value=1, max_value=12))
    if kind == "alias":
        lines = ['l0: &l0 ["lol"]']
        for i in range(1, levels):
            lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]")
        extra = "\n".join(lines)
    elif kind == "merge":
        lines = ["l0: &l0 {k0: v}"]
        for i in range(1, levels):
            merged = ", ".join([f"*l{i - 1}"] * width)
            lines.append(f"l{i}: &l{i} {{<<: [{merged}], k{i}: v}}")
        extra = "\n".join(lines)
    elif kind == "sexagesimal":
        size = draw(st.sampled_from([10, 1_000, 30_000, 200_000]))
        extra = "preferences: {colors: " + ":".join(["1"] * size) + "}"
    elif kind == "huge":
        size = draw(st.sampled_from([1_000, 100_000, 900_000]))
        extra = "preferences: {x: " + draw(st.sampled_from(["a", "'a", '"a', "9"])) + "a" * size
        extra += draw(st.sampled_from(["", "'", '"'])) + "}"
    else:
        size = draw(st.sampled_from([1_000, 100_000, 400_000]))
        extra = "preferences: {x: [" + ",".join(["1"] * size) + "]}"
    where = draw(st.sampled_from(["start", "end"]))
    return f"{extra}\n{text}" if where == "start" else f"{text}\n{extra}\n"
