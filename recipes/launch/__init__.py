"""The kit's launcher for its ReTool recipes: compose the Hydra config verl will run, validate it, print it, run it.

Modules, in the order a launch uses them:

* :mod:`recipes.launch.catalog`: the recipes (config name, stage, base model, data files) as data;
* :mod:`recipes.launch.inputs`: environment inputs (MODEL_PATH, DATA_DIR, CKPT_DIR, RETOOL_SANDBOX_URL) and defaults;
* :mod:`recipes.launch.compose`: Hydra composition against verl's config dir, and verl's own validation;
* :mod:`recipes.launch.checks` / :mod:`recipes.launch.paths`: the kit's layout, batch, path and sandbox checks;
* :mod:`recipes.launch.plan`: all of the above into one :class:`~recipes.launch.plan.Plan` and the exact command;
* :mod:`recipes.launch.report`: the dry-run table;
* :mod:`recipes.launch.cli`: ``python -m recipes.launch`` (what ``recipes/run_*.sh`` call);
* :mod:`recipes.launch.handoff`: SFT checkpoint -> merged HF model for RL (``scripts/sft_to_rl.sh``);
* :mod:`recipes.launch.cluster`: Ray cluster start arguments and status (``scripts/ray_cluster.sh``).

Keep this file free of imports: the shell entry points import submodules directly.
"""
