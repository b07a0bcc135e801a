"""Kokumi's Cluster controller.

It checks every ``Cluster`` about once a minute, reports whether Orders can deploy to it and which
Kubernetes version it runs, and registers the Kubeconfig Clusters that Environments select with Argo
CD. Embed it in a Trio program by starting :func:`run_manager` in a nursery (see
``docs/embedding.md``)::

    async with trio.open_nursery() as nursery:
        manager = await nursery.start(kokumi.run_manager, config, kokumi.Options())
        await manager.wait_checked()  # every Cluster checked once
        ...
        nursery.cancel_scope.cancel()  # stops it
"""

from kokumi.kube.config import Config
from kokumi.manager import Manager, run_manager
from kokumi.runtime.options import Options

__all__ = ["Config", "Manager", "Options", "run_manager"]
