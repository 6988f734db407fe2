"""What a run is given: the recipe table, the environment's inputs, and their files on this machine."""
