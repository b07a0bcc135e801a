"""The pure core: every rule of the spec as a value or a pure function; no I/O, no Trio.

Nothing is imported here: each module is the home of its names, and ``kokumi`` re-exports the
few an embedding program uses, so that importing one pure module loads only what it reads.
"""
