"""The pure half of the server registry: who holds each API server, and its Argo CD Secret.

First come holds a server (``ownership``); its Argo CD cluster Secret is built by ``argocd``, handed
over to the next in line by ``handover``, planned one write at a time by ``registrar``; what a
Cluster is told about its registration is ``registration``. The actor that serialises all of it
is ``kokumi.actors.registry``.
"""
