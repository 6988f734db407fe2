"""The kit's launcher for its ReTool recipes: compose the Hydra config verl will run, validate it, print it, run it.

Its rooms, lowest first (each imports only the rooms before it: tests/test_import_graph.py holds the order):

* :mod:`~recipes.launch.run_inputs`: what a run is given: the recipes as data (``catalog``), the environment's inputs
  and their defaults (``inputs``: MODEL_PATH, DATA_DIR, CKPT_DIR, RETOOL_SANDBOX_URL), and their files on this machine
  (``paths``, ``mounts``: a checkpoint dir on a container's own filesystem, ``validate_data``: the data's first rows);
* :mod:`~recipes.launch.supervision`: a launch as it runs: its log file (``runlog``), the restart supervisor
  (``restart``), rollout traces kept with the run (``trace``), ending a child's process group (``process_group``);
* :mod:`~recipes.launch.sizing`: the arithmetic of a plan: steps and checkpoint disk (``budget``), per-device memory
  (``memory``), tool calls in flight per sandbox (``capacity``), the Ray CPUs it holds (``ray_cpus``);
* :mod:`~recipes.launch.cluster`: more than one node: Ray head/worker/status/stop (``ray_cluster``, behind
  ``scripts/ray_cluster.sh``), ``ray start`` with the profile's environment (``ray_node``), one sandbox per node
  (``node_sandbox``), the node's address and interface (``nodenet``), torchrun's rendezvous (``multinode``), and the
  ``docker run`` of ``docker/run_*.sh`` (``containers``);
* :mod:`~recipes.launch.planning`: one plan: Hydra composition and verl's own validation (``compose``), every number
  derived once (``facts``), the kit's checks (``checks``, ``validate_values``, ``validate_resume``, ``reward_key``),
  ``--parity`` (``parity``), the plan and its exact command (``plan``: :class:`~recipes.launch.planning.plan.Plan`,
  which carries the stack it was planned for) and the dry-run table (``report``);
* :mod:`~recipes.launch.handoffs`: after a run: SFT checkpoint -> merged model for RL (``handoff``,
  ``scripts/sft_to_rl.sh``), RL checkpoint -> model (``export``, ``scripts/rl_to_hf.sh``), verl's merger as the kit runs
  it (``merger``), scoring a model (``eval_model``, ``scripts/eval_model.sh``);
* :mod:`recipes.launch.cli`: ``python -m recipes.launch`` / ``retool-launch`` (``recipes/run_*.sh`` exec ``run``): the
  entry point, where the hardware profile and the stack are chosen once and handed down.

Keep this file free of imports: the shell entry points import submodules directly.
"""
