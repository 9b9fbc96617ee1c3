"""The agent interface: `roach mcp` (an MCP server over the commands) and `roach skill` (the workflow for agents)."""
