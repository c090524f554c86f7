"""The built-in tools: offline, on by default, each one can be turned off (``tools.builtin``)."""
