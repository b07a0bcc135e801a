"""Actors: each owns its state, its timers and its mailbox, and nothing else."""
