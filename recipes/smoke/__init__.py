"""Smoke-test helpers: tiny offline-built assets so the ReTool pipeline can be exercised without a model hub."""
