"""The kit's launcher for its ReTool recipes: compose the Hydra config verl will run, validate it, print it, run it.

Modules, in the order a launch uses them:

* :mod:`recipes.launch.catalog`: the recipes (config name, stage, base model, data files) as data;
* :mod:`recipes.launch.inputs`: environment inputs (MODEL_PATH, DATA_DIR, CKPT_DIR, RETOOL_SANDBOX_URL) and defaults;
* :mod:`recipes.launch.compose`: Hydra composition against verl's config dir, and verl's own validation;
* :mod:`recipes.launch.checks` / :mod:`recipes.launch.paths`: the kit's layout, batch, path and sandbox checks;
  :mod:`recipes.launch.mounts`: a checkpoint dir on a container's own (overlay) root filesystem;
* :mod:`recipes.launch.facts`: every number of a plan (layout, steps, checkpoints, Ray CPUs, in-flight calls, memory),
  derived once; the arithmetic it calls: :mod:`recipes.launch.budget` (steps, checkpoint disk use),
  :mod:`recipes.launch.ray_cpus`, :mod:`recipes.launch.memory` (per-device memory of training and of vLLM);
  :mod:`recipes.launch.capacity`: tool calls in flight per sandbox against its capacity;
* :mod:`recipes.launch.plan`: all of the above into one :class:`~recipes.launch.plan.Plan` and the exact command;
* :mod:`recipes.launch.report`: the dry-run table, formatted from the plan's facts (it derives nothing);
* :mod:`recipes.launch.runlog`, :mod:`recipes.launch.restart`, :mod:`recipes.launch.process_group`: the launch
  itself: its log file, the restart supervisor, ending a child's process group;
* :mod:`recipes.launch.cli`: ``python -m recipes.launch`` / ``retool-launch`` (``recipes/run_*.sh`` exec ``run``);
* :mod:`recipes.launch.handoff`: SFT checkpoint -> merged HF model for RL (``scripts/sft_to_rl.sh``);
* multi-node: :mod:`recipes.launch.cluster` (``scripts/ray_cluster.sh``: head/worker/status/stop, the all-nodes
  and per-node sandbox checks), :mod:`recipes.launch.ray_node` (``ray start`` with the profile's environment),
  :mod:`recipes.launch.node_sandbox` (one sandbox per node), :mod:`recipes.launch.nodenet` (the node's address and
  interface, the socket-interface variables of both launchers), :mod:`recipes.launch.multinode` (torchrun
  rendezvous checks);
* :mod:`recipes.launch.containers`: the ``docker run`` command of ``docker/run_*.sh`` (mounts of the data roots).

Keep this file free of imports: the shell entry points import submodules directly.
"""
