"""The server registry: the only writer of Secrets in Argo CD's namespace.

It serialises every claim on a server through the pure first-come table
(``kokumi.core.registry.ownership``) and then makes Argo CD's Secrets agree with that table. The
table is the intent; the Secrets, as the API server last showed or accepted them, are the facts; and
what a Cluster is told is computed from both, never from the intent alone:

- a Cluster *holds* a server only while a Secret of Kokumi's names it (so "holding" means "a
  credential of mine is in Argo CD", which is what its finalizer guards);
- a release is *done* only when no Secret names the Cluster any more;
- a write the API server refuses or never answers leaves the server out of step, and the registry
  retries it with capped, jittered backoff until it is in step, logging each change of error once.

The API server is the second guard: the Secret is named after the server and ``create`` is atomic,
so ``AlreadyExists`` means somebody holds it, and its labels say who. The registry keeps no memory a
crash could lose: on start the table is rebuilt from the Secrets found, their waiting order from the
annotation :data:`kokumi.core.registry.handover.ANNOTATION_WAITING`, so a restart with nothing
changed writes nothing and hands over in the same order as before.

Requests, and the news of the registry's own Secret watch, come through one bounded inbox with a
one-shot reply channel each. News for Clusters other than the asker (a waiter that just took a
server over) goes out through callbacks that never block, because a Cluster actor may at that very
moment be waiting for the registry. Every request carries the uid of the Cluster object it acts
for: a late message from a Cluster that was deleted (and perhaps created again under its name)
never acts for its successor.

What to write is decided in :mod:`kokumi.core.registry.registrar`, purely: the registry only carries
its plans out, and who holds and who waits across replicas, as the Secrets say, in
:mod:`kokumi.core.registry.lines`, purely too. The sections, each a class built on the next:
``inbox`` (serving the inbox: the public face and the loop), ``facts`` (the plans carried out,
retried, and the Secret watch's news) and ``state`` (what the registry remembers, and the steps
they all take).
"""

from kokumi.actors.registry.facts import HANDOVER_REASON
from kokumi.actors.registry.inbox import Registry

__all__ = ["HANDOVER_REASON", "Registry"]
