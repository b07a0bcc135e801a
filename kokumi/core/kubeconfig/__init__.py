"""A Cluster's kubeconfig becomes a Connection, or a precise Refusal.

In four modules at the reader's own seams: ``connection`` (the Connection, the Refusal and its
codes), ``events`` (the YAML text as a document, within limits), ``certificates`` (certificates and
keys) and ``reader`` (what a Cluster's kubeconfig may hold: parse, examine, minimise, render).
Each name is imported from its module.
"""
