"""``kokumi cluster``: register and inspect Clusters from a shell, one module per subcommand."""

from kokumi.cmd.cluster.add import add_parser

__all__ = ["add_parser"]
