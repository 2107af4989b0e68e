"""The SQLite store: the truth of sessions, watches, journal, versions, actions and search."""
