"""The arithmetic of a plan: steps and checkpoint disk, per-device memory, sandbox load, Ray CPUs."""
