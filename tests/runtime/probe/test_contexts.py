"""The probe's TLS contexts: one per distinct material, bounded, never one for unusable material."""

from __future__ import annotations

import pytest

from kokumi.kube.errors import ConfigError
from kokumi.runtime.probe import checks
from kokumi.testing.controlplane import CertificateAuthority


def test_contexts_are_shared_by_material_and_bounded() -> None:
    cache = checks._ContextCache(2)
    first, second, third = (CertificateAuthority.create(f"ca-{i}").pem for i in range(3))
    a = cache.get(first, None, None, False)
    assert cache.get(bytes(first), None, None, False) is a, "equal material, one context"
    assert cache.get(first, None, None, True) is not a, "insecure is part of the material"
    b = cache.get(second, None, None, False)
    cache.get(third, None, None, False)  # over the bound: the least recently used goes
    assert cache.get(second, None, None, False) is b
    assert cache.get(first, None, None, False) is not a


def test_unusable_material_is_refused_every_time() -> None:
    cache = checks._ContextCache(4)
    for _ in range(2):
        with pytest.raises(ConfigError, match="not valid PEM"):
            cache.get(
                b"-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n", None, None, False
            )


def test_server_urls_are_parsed_once_but_a_hostile_length_is_never_kept() -> None:
    """A kubeconfig may spell a server URL of any length; the parsed-URL cache outlives the
    Cluster, so only URLs of a real API server's length are kept."""
    short = "https://spoke-kept.example:6443/"
    assert checks._base_url(short) is checks._base_url(short), "parsed once"
    assert str(checks._base_url(short)) == "https://spoke-kept.example:6443"
    assert checks._base_url("https://[::1") is None, "not a URL"
    before = checks._parsed_url.cache_info().currsize
    long = "https://spoke.example:6443/" + "p" * 10_000
    assert checks._base_url(long) is not None
    assert checks._parsed_url.cache_info().currsize == before, "a 10 KB URL is not kept"
