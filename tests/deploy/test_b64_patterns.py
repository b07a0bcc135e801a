"""The base64 patterns of kokumi-argocd-secret-integrity against Python's own base64."""

from __future__ import annotations

import base64
import re

import hypothesis.strategies as st
import yaml
from hypothesis import given

from kokumi.core.registry.ownership import is_argocd_own
from tests.support.b64_patterns import ASCII, contains, starts_with
from tests.support.deploy import DEPLOY

WORDS = (b"execproviderconfig", b"awsauthconfig")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def flip_case(word: bytes, mask: list[bool]) -> bytes:
    return bytes(
        (c ^ 0x20) if flip and chr(c).isalpha() else c for c, flip in zip(word, mask, strict=False)
    )


@given(
    st.sampled_from(WORDS),
    st.binary(max_size=40),
    st.binary(max_size=40),
    st.lists(st.booleans(), min_size=18, max_size=18),
)
def test_contains_finds_the_word_in_any_case_at_any_offset(
    word: bytes, before: bytes, after: bytes, mask: list[bool]
) -> None:
    text = before + flip_case(word, mask) + after
    assert re.match(contains(word), b64(text))


@given(st.sampled_from(WORDS), st.binary(max_size=80))
def test_contains_matches_only_when_the_word_is_there(word: bytes, text: bytes) -> None:
    there = word in text.lower()  # bytes.lower folds ASCII letters only, as the pattern does
    assert bool(re.match(contains(word), b64(text))) == there


@given(st.binary(max_size=60), st.binary(max_size=60))
def test_the_escape_pattern_finds_backslash_u(before: bytes, after: bytes) -> None:
    pattern = contains(b"\\u", fold_case=False)
    assert re.match(pattern, b64(before + b"\\u" + after))
    assert bool(re.match(pattern, b64(before))) == (b"\\u" in before)


@given(st.binary(max_size=60))
def test_ascii_is_every_byte_below_0x80(text: bytes) -> None:
    assert bool(re.match(ASCII, b64(text))) == all(c < 0x80 for c in text)


@given(st.text(alphabet="htpsHTPS:/kubernetsdfaulvcKUBERNETSDFAULVC.-", max_size=40))
def test_starts_with_is_a_case_blind_prefix(server: str) -> None:
    prefix = b"https://kubernetes.default"
    data = server.encode()
    assert bool(re.match(starts_with(prefix), b64(data))) == data.lower().startswith(prefix)


def test_the_policy_carries_exactly_these_patterns() -> None:
    path = DEPLOY / "policies" / "kokumi-argocd-secret-integrity.yaml"
    policy = next(yaml.safe_load_all(path.read_text()))
    text = yaml.safe_dump(policy, width=10_000)
    for word in WORDS:
        assert contains(word) in text, word
    assert contains(b"\\u", fold_case=False) in text
    assert ASCII in text
    for prefix in (b"https://kubernetes.default", b"http://kubernetes.default"):
        assert starts_with(prefix) in text, prefix


def _own_cluster_patterns() -> list[str]:
    """The regular expressions of the policy's argoCDOwnCluster variable, as the policy has them."""
    path = DEPLOY / "policies" / "kokumi-argocd-secret-integrity.yaml"
    policy = next(yaml.safe_load_all(path.read_text()))
    (variable,) = [v for v in policy["spec"]["variables"] if v["name"] == "argoCDOwnCluster"]
    patterns = re.findall(r"variables\.server\.matches\('([^']*)'\)", variable["expression"])
    assert len(patterns) == 2
    return patterns


OWN_SPELLINGS = [
    "https://kubernetes.default.svc",
    "https://kubernetes.default.svc/",
    "https://KUBERNETES.default.svc",
    "HTTPS://Kubernetes.Default.Svc",
    "https://kubernetes.default.svc:443",
    "https://kubernetes.default.svc.cluster.local",
    "https://kubernetes.default",
    "http://kubernetes.default.svc",
]


@given(
    st.sampled_from(OWN_SPELLINGS)
    | st.text(alphabet="htpsHTPS:/kubernetsdfaulvcKUBERNETSDFAULVC.-4\u017f\u212a", max_size=40)
    | st.sampled_from(OWN_SPELLINGS).map(lambda s: s.replace("k", "\u212a"))  # Kelvin sign
)
def test_the_policy_and_the_predicate_agree_on_argo_cds_own_cluster(server: str) -> None:
    """One predicate: what the admission policy refuses, the manager and the CLI call a
    ClusterConflict (and never try to register), and nothing else."""
    refused = any(re.search(p, b64(server.encode())) for p in _own_cluster_patterns())
    assert is_argocd_own(server) == refused


def test_every_spelling_of_the_in_cluster_server_is_argo_cds_own() -> None:
    assert all(is_argocd_own(s) for s in OWN_SPELLINGS)
    assert not is_argocd_own("https://kubernetes.example")
    assert not is_argocd_own("https://\u212aubernetes.default.svc")  # not an ASCII k
