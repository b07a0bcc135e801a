"""What the ClusterSources actor reads besides its own watch: a Secret's verdict, and the
resources the manager may not be allowed to list.

Apart from the actor (:mod:`kokumi.actors.sources`), which keeps what these reads leave behind
(the verdicts per Secret version, whether Cluster API's clusters and vcluster's Services are
readable): a read's outcome depends only on what the API server answers.
"""

from __future__ import annotations

import functools
import logging
import random
from collections.abc import Callable
from typing import Literal

import trio

from kokumi.actors.parsing import off_loop
from kokumi.actors.secretreads import SecretReads
from kokumi.core import limits
from kokumi.core.reasons import Reason
from kokumi.core.secretaccess import not_readable_message
from kokumi.core.sources import secretplan
from kokumi.core.sources.plan import kubeconfig_problem
from kokumi.core.sources.secretsource import Shape
from kokumi.kube import errors
from kokumi.kube.client import Client
from kokumi.kube.paths import resource_path
from kokumi.kube.watch import Resync, Store, WatchEvent, watch
from kokumi.kube.wire import METADATA_LIST
from kokumi.objects import Resource

__all__ = ["Contexts", "Read", "follow_listed", "read_verdict"]

#: The sources' log, under one name wherever its lines are written.
log = logging.getLogger("kokumi.actors.sources")

Contexts = tuple[tuple[str, tuple[Reason, str] | None], ...]
Read = tuple[tuple[Reason, str] | None, Contexts, int]
"""A Secret's verdict (None: usable), each context's with contexts All, and how many more."""


async def read_verdict(
    reads: SecretReads,
    namespace: str,
    name: str,
    shape: Shape | None,
    *,
    username: Callable[[], str | None],
    own_namespace: str,
    contexts_limit: int,
) -> Read | Literal[False]:
    """The Secret's verdict (None: usable) and, with contexts All, each context's (the first
    ``contexts_limit`` by name, and how many more); or False when it is gone. Its data dies
    here, read in a worker thread: it is anybody's text (kokumi/actors/parsing.py). ``shape``
    None is Cluster API's kubeconfig."""
    try:
        secret = await reads.get(namespace, name)
    except errors.NotFound:
        return False
    except errors.Forbidden:
        refused = not_readable_message(name, namespace, username(), own_namespace)
        return (Reason.SECRET_NOT_READABLE, refused), (), 0
    except errors.KubeError as exc:
        failed = f"reading Secret {name} failed ({type(exc).__name__}); Kokumi retries"
        return (Reason.SECRET_NOT_READABLE, failed), (), 0
    if shape is not None and shape.all_contexts:
        return await off_loop(
            functools.partial(secretplan.judge_contexts, secret, shape, contexts_limit)
        )
    problem = await off_loop(functools.partial(kubeconfig_problem, secret, shape))
    return problem, (), 0


async def follow_listed(
    client: Client,
    nursery: trio.Nursery,
    resource: Resource,
    label_selector: str | None,
    store: Store,
    *,
    what: str,
    reported: str,
    backoff_max: float,
    missing_max: float,
    readable: Callable[[bool], None],
    changed: Callable[[str | None], None],
    installed: Callable[[bool], None] = lambda _: None,
) -> None:
    """Watch ``resource`` (metadata only) into ``store`` once it can be listed, the watch in
    ``nursery``; until then tell ``readable`` False (once), for the sources that need it to
    report ``reported`` and change nothing, and try again with backoff up to ``backoff_max``
    while it is forbidden, ``missing_max`` while it is not installed.

    A missing permission or API is a state to report, not a fault: a manager may run without
    Cluster API, or without leave to list Services. Each full list tells ``readable`` True, and
    ``changed`` is told each namespace whose objects changed (None: any). ``installed`` is told
    whether the API exists each time that changes, for the sources to say which it is.

    Why two bounds: leave to list is granted by a person, who then waits; an API is installed
    by a CRD, whose first objects a platform team expects picked up at once (with a backoff up
    to minutes, the first Cluster API cluster came a half minute or more after its CRD). The
    manager may not watch CRDs, so it asks again every few seconds while the API is missing:
    one 404 of an empty list each time, nothing a hub notices.
    """
    delay = 0.0
    said: str | None = None
    known: tuple[bool, str] | None = None  # what ``readable`` and ``installed`` were told
    params = {"limit": "1"}
    if label_selector:
        params["labelSelector"] = label_selector
    while True:
        try:
            await client.request(
                "GET", resource_path(resource), params=params, accept=METADATA_LIST
            )
            break
        except (errors.Forbidden, errors.NotFound) as exc:
            text = "not installed" if isinstance(exc, errors.NotFound) else "forbidden"
            if said != text:
                # Not installed is a normal state (no Cluster API here); forbidden is a choice
                # somebody made, or a mistake: worth a warning.
                log.log(
                    logging.INFO if text == "not installed" else logging.WARNING,
                    "cannot read %s (%s): ClusterSources that need them report %s and"
                    " change nothing; retrying with backoff, every few seconds while not"
                    " installed",
                    what,
                    text,
                    reported,
                )
                said = text
            if known != (False, text):
                known = (False, text)
                installed(text != "not installed")
                readable(False)
                changed(None)
        except errors.KubeError as exc:
            if said != type(exc).__name__:
                log.warning("cannot list %s: %s; retrying", what, exc)
                said = type(exc).__name__
        cap = missing_max if said == "not installed" else backoff_max
        delay = min(cap, max(1.0, delay * 2))
        await trio.sleep(delay / 2 + random.uniform(0, delay / 2))  # noqa: S311 (jitter)
    if said is not None:
        log.info("may read %s now", what)
    installed(True)
    send, receive = trio.open_memory_channel[WatchEvent | Resync](64)
    await nursery.start(
        functools.partial(
            watch,
            client,
            resource,
            send,
            store=store,
            metadata_only=True,
            label_selector=label_selector,
            # Whoever may create them writes their metadata: kept within the bounds, as the
            # sources' own (a Service or a Cluster API cluster of 90,000 labels is a stub here).
            form=limits.kept,
        )
    )
    async for event in receive:
        if isinstance(event, Resync):
            readable(True)
            changed(None)
        else:
            changed(str(event.object.get("metadata", {}).get("namespace", "")))
