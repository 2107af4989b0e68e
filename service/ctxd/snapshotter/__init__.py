"""Builds snapshots: collectors run, signals and changes derived, attempts followed, commit."""
