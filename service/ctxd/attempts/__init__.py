"""Attempts: the typed attempt (model), its binding to processes (binding), the dump's history of
attempts (history) and their folding (folding), and command lines compared (flags)."""
