"""Zero-configuration discovery: what to watch and what was tried, from the agent's actions."""
