"""The agent loop: providers, tools, recovery. It reaches the store through a small protocol."""
