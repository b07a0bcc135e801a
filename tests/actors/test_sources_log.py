"""What a ClusterSource's writes say in the manager's log, read as an operator reads it."""

from __future__ import annotations

import logging

import pytest
import trio

from kokumi.core.sources.bounds import Bounds
from kokumi.kube.resources import SECRETS
from tests.actors.test_sources_cost import NS, _clusters, _manager, _secret, _source, _until
from tests.core.kubeconfig.test_contexts import shared
from tests.support.fakeapi import FakeApi

LOGGER = "kokumi.actors.sources"


async def test_a_source_logs_each_cluster_it_created_and_deleted_in_plain_words(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    fake = FakeApi(namespaces=("default", "kokumi", "argocd", NS))
    fake.put(_source())
    fake.put(_secret("one", shared(1)))
    async with _manager(fake, Bounds()):
        await _until("the source's Cluster", lambda: _clusters(fake) == {"ctx-00000"})
        fake.remove(SECRETS, "one", NS)
        await _until("the Cluster gone with its Secret", lambda: not _clusters(fake))
        await trio.sleep(0.5)
    said = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert f"ClusterSource {NS}/team: created Cluster {NS}/ctx-00000" in said, said
    assert f"ClusterSource {NS}/team: deleted Cluster {NS}/ctx-00000" in said, said
