"""After a run: checkpoints merged into models (SFT -> RL, RL -> release) and models scored."""
