"""Tools the agent calls: the registry, the built-in tools, choosing one, and running a call."""
