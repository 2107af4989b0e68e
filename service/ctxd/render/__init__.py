"""Renderers: a snapshot as its Markdown dump and files, and the HTML pages' view-models."""
