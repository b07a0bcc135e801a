"""Kokumi's Cluster controller.

It checks every ``Cluster`` about once a minute, reports whether Orders can deploy to it and which
Kubernetes version it runs, and registers the Kubeconfig Clusters that Environments select with Argo CD.
"""
