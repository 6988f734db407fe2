"""Where a user's prepared data, base models and checkpoints live unless told otherwise.

Why here, at the bottom of the recipes: the launcher (``recipes/launch/run_inputs/inputs.py``: ``DATA_DIR``,
``MODELS_DIR``, ``CKPT_ROOT``) and the offline bundle (``retool-bundle``, ``recipes/retool/bundle.py``) must agree on
them, and the recipe code may import nothing of the launcher (tests/test_import_graph.py). Each is also the environment
variable of the same name's default; ``~`` is the user's home.
"""

DEFAULT_DATA_DIR = "~/data/retool"
DEFAULT_MODELS_DIR = "~/models"
DEFAULT_CKPT_ROOT = "~/checkpoints/retool"
