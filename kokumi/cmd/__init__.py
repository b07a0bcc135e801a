"""The entry points: one module per command, with its flags beside it."""
