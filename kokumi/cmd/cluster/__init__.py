"""``kokumi cluster``: register and inspect Clusters from a shell, one module per subcommand."""
