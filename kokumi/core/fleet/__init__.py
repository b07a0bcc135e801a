"""Many replicas, one fleet: who leads, which replica checks which Cluster, and what a stopping
manager leaves for the next (its stop record).

The pure rules of running more than one manager: leader election as a function of what the Lease
says and the clock, and each Cluster's shard and each replica's order of preference over shards.
The Leases themselves are written by ``kokumi.runtime.election``.
"""
