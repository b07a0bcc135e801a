"""One check of one cluster connection: can Kokumi reach it, and does it accept the credential?

The check is all I/O and no policy: it asks the API server two or three questions and hands what
it finds to :mod:`kokumi.core.cluster.diagnosis`, a pure module that decides which Reason a
failure or an answer is and what its one-line message says; the :class:`Outcome` carries them
into the Cluster's Ready condition. When to check, how often and what to do with the answer is
the Cluster actor's.

Two requests, and a third for most Clusters, over one connection (:mod:`.questions`):

1. ``GET /version`` proves the server is a Kubernetes API server and says what it runs. It is
   often readable anonymously, so it proves nothing about the credential.
2. ``POST /apis/authentication.k8s.io/v1/selfsubjectreviews`` proves the credential: every
   authenticated user may create one (the built-in ``system:basic-user`` role), it changes nothing,
   and it says who the server thinks we are. Servers older than Kubernetes 1.28 lack it, so a 404
   falls back to a ``SelfSubjectAccessReview``, which every version since 1.6 has.
3. For a Cluster without ``spec.scope.namespaces`` whose credential the review found good,
   ``POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews`` of listing every resource
   cluster-wide: Argo CD's cluster cache lists and watches every kind cluster-wide unless its
   cluster Secret names namespaces, and fails with a credential that may not (argo-cd#7521).
   A no is ``NamespacesRequired``, with the fix (name the namespaces, or grant the list). A yes
   is kept for the connection ten minutes (:data:`kokumi.core.cluster.findings.CLUSTER_WIDE_KEPT`),
   a no never: a steady Ready fleet asks two questions a check, and a grant on the spoke shows
   at the next check. The manager's own check (InCluster) does not ask: Argo CD uses its own
   ServiceAccount there.

A 401 from any of them means the credential is refused (``Unauthorized``), and so does a review that
says we are ``system:anonymous``. A 403 on the review means the credential authenticates but its
user may not do even what every user may: somebody removed ``system:basic-user`` or bound the user
nothing at all. Such a credential cannot deploy anything, so it is not Ready: the reason is
``Forbidden``, and the message says to bind the user a role.

Nothing here raises for a network, TLS or HTTP problem: everything becomes an Outcome.
Credentials never enter an Outcome, a log line or an exception text; messages name hosts, ports
and reasons only.

Two ways to ask, one answer. Without a proxy (nearly every check) the requests go on a
blocking socket with Python's ``ssl`` in a worker thread (:mod:`.lean`), their answers read
by h11 as they arrive (linear time; bounded bytes, reads and parser events an answer, on both
paths: the thread holds the GIL while it parses, and httpx reads on the event loop, so a slow
read of a hostile answer would stall every other check): a check then costs about what its
handshake costs, half of what it cost through httpx's async client. Behind a
``proxy-url`` the check goes through httpx, which speaks CONNECT and SOCKS. Both paths hand the
same exceptions and answers to the same diagnosis, and tests/runtime/probe/test_lean.py holds
them to the same Outcome for every broken and hostile server it has.

The package in three layers: :mod:`.checks` (the public ``check``, ``check_client`` and
``check_config``, and the path through httpx) above :mod:`.lean` (the lean HTTP/1.1 reader)
above :mod:`.questions` (the questions and the Outcome each answer becomes). It re-exports
nothing: ``from kokumi.runtime.probe.checks import check``. Every module logs as
``kokumi.runtime.probe``.
"""
