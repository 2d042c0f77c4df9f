"""The whole system: command-line latency, sustained load, an MCP session."""
