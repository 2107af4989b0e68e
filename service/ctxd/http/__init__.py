"""HTTP route handlers: thin wrappers over one domain call each."""
