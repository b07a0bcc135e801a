"""The manager: wires the registry, the dispatcher, the Cluster actors and the in-cluster keeper.

This is also the entry point for embedding: another Trio program starts the manager in its own
nursery and stops it by cancelling that nursery (or a scope around it)::

    async with trio.open_nursery() as nursery:
        manager = await nursery.start(kokumi.run_manager, config)
        await manager.wait_checked()
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

from kokumi import probe
from kokumi.actors.context import (
    Context,
    CountingLimiter,
    EventRecorder,
    InClusterCheck,
    Metrics,
    Options,
    Probe,
)
from kokumi.actors.dispatcher import Dispatcher
from kokumi.actors.incluster import keep_in_cluster
from kokumi.actors.registry import Registry
from kokumi.kube.client import Client
from kokumi.kube.config import Config

__all__ = ["Manager", "Options", "run_manager"]

log = logging.getLogger(__name__)


class Manager:
    """A running manager, as handed back by :func:`run_manager` through ``nursery.start``."""

    def __init__(
        self,
        client: Client,
        options: Options,
        *,
        check: Probe = probe.check,
        check_own: Callable[..., Awaitable[probe.Finding]] = probe.check_client,
    ) -> None:
        """``check`` and ``check_own`` are the two checks (a Kubeconfig Cluster's, and the
        manager's own cluster's); a model test puts stand-ins there, nothing else does."""
        self.options = options
        self.metrics = Metrics()
        self.client = client
        limiter = CountingLimiter(options.max_concurrent_checks, self.metrics)
        self.registry = Registry(
            client,
            options.argocd_namespace,
            self.metrics,
            backoff_initial=options.retry_initial,
            backoff_max=options.retry_max,
        )
        self.context = Context(
            client=client,
            options=options,
            registry=self.registry,
            in_cluster=InClusterCheck(client, limiter, options, self.metrics, check_own),
            probe_limiter=limiter,
            events=EventRecorder(client),
            metrics=self.metrics,
            check=check,
        )
        self.dispatcher = Dispatcher(self.context, self.registry)

    async def wait_checked(self) -> None:
        """Return once every Cluster that exists now has been checked at least once."""
        await self.dispatcher.wait_checked()

    async def run(
        self, *, task_status: trio.TaskStatus[Manager] = trio.TASK_STATUS_IGNORED
    ) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self.registry.run)
            if self.options.keep_in_cluster:
                await nursery.start(keep_in_cluster, self.client, self.options.namespace)
            await nursery.start(self.dispatcher.run)
            log.info("manager started (namespace %s)", self.options.namespace)
            task_status.started(self)


async def run_manager(
    config: Config | None = None,
    options: Options | None = None,
    *,
    task_status: trio.TaskStatus[Manager] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the manager until cancelled; ``nursery.start`` hands back the :class:`Manager`.

    ``config`` is the hub connection (default: in-cluster, else the kubeconfig as kubectl finds
    it); ``options`` the behaviour (default: what the spec asks for).
    """
    config = config or Config.load()
    options = options or Options()
    async with Client(config, field_manager=options.field_manager) as client:
        await Manager(client, options).run(task_status=task_status)
