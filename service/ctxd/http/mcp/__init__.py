"""The MCP transport at /mcp: ctxd's session API as tools and resources for a model."""
