"""A Cluster's kubeconfig becomes a Connection, or a precise Refusal.

In five modules at the reader's own seams: ``connection`` (the Connection, the Refusal and its
codes), ``events`` (the YAML text as a document, within limits), ``certificates`` (certificates and
keys), ``entries`` (what one cluster or user entry may hold: the server, the credential, the
mechanisms refused) and ``reader`` (the document to its context's cluster and user: parse,
examine, read_contexts, minimise, render). Each name is imported from its module.
"""
