"""Stub package: only ``functional`` exists."""
