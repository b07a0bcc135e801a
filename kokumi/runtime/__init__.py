"""The I/O pieces one manager process runs on, below the actors: the probe, the Lease loop,
the health server, the heap, logs, signals and the options.

Nothing is imported here: each module is the home of its names (``kokumi`` re-exports
``Options`` and ``LeadershipLost``), and one piece loads without the others.
"""
