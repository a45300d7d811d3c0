"""agentledger.ledger."""

__all__: list[str] = []
