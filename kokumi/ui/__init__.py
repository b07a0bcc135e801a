"""``kokumi ui``: the Clusters pages and the New Cluster form, as the signed-in user.

:mod:`~kokumi.ui.app` puts the pages together and signs users in; :mod:`~kokumi.ui.clusters` and
:mod:`~kokumi.ui.environments` are the pages (the Clusters list reading through
:mod:`~kokumi.ui.clusterlist`), :mod:`~kokumi.ui.pages` what they share,
:mod:`~kokumi.ui.security` who may drive them and what a page may do; :mod:`~kokumi.ui.serve`
runs them on Hypercorn's Trio worker inside a Trio program (``kokumi ui``, ``kokumi demo --ui``).
Every Kubernetes call is the user's own, so their RBAC and Kokumi's admission policies apply
exactly as to ``kokumi cluster``. In a cluster (:mod:`~kokumi.ui.incluster`,
``kokumi ui --in-cluster``) that is the user's own bearer token, or the user a trusted
authenticating proxy names, impersonated.
"""
