"""What an Environment selects, what it deploys to, and the status that says so.

Label selectors with the API server's semantics, the Clusters an Environment selects, its
targets (one Ready Cluster per server, the first by name), and its status.
"""
