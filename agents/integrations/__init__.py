"""agentledger.agents.integrations: bridges from other agent stacks onto the ledger."""
