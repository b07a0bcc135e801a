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

This package is the embedding program's one way in: every name ``docs/embedding.md`` uses, each
defined in one module (its home, named in ``_HOMES``) and only re-exported here. The names are
imported on first use (PEP 562), so that importing a pure module such as
``kokumi.core.registry.ownership``, which imports this package first, does not load the manager, the
actors, the probe, Trio and httpx with it. Kokumi's own code imports from the homes.
"""

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    # What mypy and IDEs see; tests/test_exports.py holds it equal to ``_HOMES``.
    from kokumi.core.cluster.egress import EgressPolicy
    from kokumi.core.fleet.leader import LeaderElection, Timing
    from kokumi.core.fleet.shards import Sharding
    from kokumi.core.secretaccess import SecretScope
    from kokumi.kube.config import Config
    from kokumi.manager import Manager, run_manager
    from kokumi.runtime.election import LeadershipLost
    from kokumi.runtime.options import Options

__all__ = [
    "Config",
    "EgressPolicy",
    "LeaderElection",
    "LeadershipLost",
    "Manager",
    "Options",
    "SecretScope",
    "Sharding",
    "Timing",
    "run_manager",
]

#: Each public name -> the module that defines it.
_HOMES = {
    "Config": "kokumi.kube.config",
    "EgressPolicy": "kokumi.core.cluster.egress",
    "LeaderElection": "kokumi.core.fleet.leader",
    "LeadershipLost": "kokumi.runtime.election",
    "Manager": "kokumi.manager",
    "Options": "kokumi.runtime.options",
    "SecretScope": "kokumi.core.secretaccess",
    "Sharding": "kokumi.core.fleet.shards",
    "Timing": "kokumi.core.fleet.leader",
    "run_manager": "kokumi.manager",
}


def _getattr(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(home), name)
    globals()[name] = value  # the next lookup is an ordinary one
    return value


def _dir() -> list[str]:
    return sorted({*globals(), *__all__})


# Hidden from mypy, which would otherwise take any attribute of the package for one that exists
# (a module-level ``__getattr__`` says so) and let ``kokumi.Optoins`` pass.
if not _typing.TYPE_CHECKING:
    __getattr__, __dir__ = _getattr, _dir
