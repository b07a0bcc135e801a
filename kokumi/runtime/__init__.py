"""The I/O pieces one manager process runs on, below the actors: the probe, the Lease loop,
the health server, the heap, logs, signals and the options."""
