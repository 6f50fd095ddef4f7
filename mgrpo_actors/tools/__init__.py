"""Tools agents call: `search` and `visit` over the synthetic web, `reason` for the main agent, and the registry."""
