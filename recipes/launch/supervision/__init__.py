"""A launch as it runs: its log, the restart supervisor, rollout traces, ending a child's process group."""
