"""A Cluster's kubeconfig, read from its Secret and judged: what a Cluster actor carries out when
its lifecycle (:mod:`kokumi.core.cluster.lifecycle`) says a read is due.

Apart from the actor because it holds no state of its own: the read before, passed in, is all it
reuses.
"""

from __future__ import annotations

import functools
import random

from kokumi.actors.parsing import off_loop
from kokumi.actors.secretreads import SecretReads
from kokumi.core import api
from kokumi.core.cluster import findings
from kokumi.core.cluster.findings import Read, version_of
from kokumi.core.cluster.status import Outcome, SecretRead, cluster_outcome
from kokumi.core.kubeconfig.connection import Connection, Refusal
from kokumi.core.kubeconfig.reader import parse
from kokumi.kube import errors
from kokumi.objects import resource_version, secret_data, secret_keys

__all__ = ["read_kubeconfig"]


async def read_kubeconfig(
    reads: SecretReads,
    cluster: api.Cluster,
    *,
    version: str | None,
    last: Read | None,
    news: int,
    now: float,
    username: str | None,
    own_namespace: str,
) -> Read:
    """Read ``cluster``'s Secret and parse its kubeconfig; what it makes of the Cluster.

    ``version`` is what the Secret watch says the read is of (used when the Secret cannot be
    read); ``last`` the read before, whose connection serves again when the Secret's version is
    the same; ``news`` the actor's count of words of a changed Secret as the read begins.
    """
    ref = cluster.secret_ref
    assert ref is not None  # parse_cluster guarantees it for Kubeconfig
    # Renewed every 10-20 minutes at random, so Clusters made together do not all read again
    # at once (findings.SECRET_REREAD).
    keep = findings.SECRET_REREAD * random.uniform(1.0, 2.0)  # noqa: S311
    namespace = cluster.metadata.namespace

    def judged(read: SecretRead) -> Outcome | None:
        return cluster_outcome(cluster, read, username=username, own_namespace=own_namespace)

    try:
        secret = await reads.get(namespace, ref.name)
    except errors.NotFound:
        missing = SecretRead(ref.name, ref.key, namespace, found=False)
        return Read(version, now, None, judged(missing), keep=keep, news=news, reusable=False)
    except errors.Forbidden:
        refused = SecretRead(ref.name, ref.key, namespace, readable=False)
        return Read(version, now, None, judged(refused), keep=keep, news=news, reusable=False)
    # The version read, not the one the watch last saw: the watch may not have listed yet.
    read_version = resource_version(secret)
    version = version_of(cluster, read_version)
    text = secret_data(secret, ref.key)
    parsed: Connection | Refusal | None = None
    if (
        read_version is not None
        and last is not None
        and last.connection is not None
        and last.version == version
    ):
        # Read again for its own sake (may the manager still read it?): the same version holds
        # the same kubeconfig, and the same Connection tells the registry that nothing changed.
        # Parsing it anew cost a YAML parse a Cluster every 10-20 minutes.
        parsed = last.connection
    elif text is not None:
        # Whoever may write the Secret chooses what this costs: read off the event loop
        # (kokumi/actors/parsing.py), so that one Cluster's Secret never stalls every other
        # actor, within the reader's own budget.
        context = cluster.kubeconfig_context
        parsed = await off_loop(functools.partial(parse, text, context=context))
    read = SecretRead(ref.name, ref.key, namespace, keys=secret_keys(secret), kubeconfig=parsed)
    connection = parsed if isinstance(parsed, Connection) else None
    return Read(version, now, connection, judged(read), keep=keep, news=news)
