"""One Cluster: when it is checked, where a check may connect, what a failure means, its status.

The check's rules (its place in the minute, the spec's numbers, the egress allow and deny lists),
what a failed check says (``diagnosis``), and a Cluster's status and Ready history.
The ClusterSource rules that make Clusters from Secrets are ``kokumi.core.sources``.
"""
