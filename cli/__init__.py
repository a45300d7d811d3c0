"""agentledger.cli: the `agentledger` command, the composition root of the project."""

from agentledger.cli._main import build_parser, main

__all__ = ["build_parser", "main"]
