"""The pure core: every rule of the spec as a value or a pure function; no I/O, no Trio."""
