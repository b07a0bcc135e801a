"""``kokumi demo``: the manager against a local hub + spoke it starts itself."""
