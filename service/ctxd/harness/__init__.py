"""Agent harnesses (Claude Code, opencode): their hook events, installs and session binding."""
