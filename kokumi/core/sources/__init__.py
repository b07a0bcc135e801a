"""ClusterSources: the rules that keep one Cluster per kubeconfig Secret a source matches.

The rules of the ClusterSources actor (``kokumi.actors.sources``): a source's spec
(``spec``, and ``secretsource`` for the shapes of ``from: Secrets`` and ``VCluster``), the rules
every kind shares and the plan they end in (``plan``), each kind's candidates (``clusterapi``,
``secretplan`` with ``vcluster``), the manager's bounds on what one source makes (``bounds``),
and a source's status (``status``).
"""
