"""Signals: pure rules from observations to what needs attention, worst first."""
