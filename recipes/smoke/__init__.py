"""The smoke run (``bash scripts/smoke.sh``, ``python -m recipes.smoke``): the whole ReTool pipeline with a tiny model.

* :mod:`~recipes.smoke.cli`: the command line; standard library only at import (``check-args`` runs before the venv);
* :mod:`~recipes.smoke.commands`: sizes, overrides, and every stage's command and environment per platform;
* :mod:`~recipes.smoke.pipeline`: the stages, what each one runs and asserts, and the run loop;
* :mod:`~recipes.smoke.supervisor`: child processes (process groups, deadlines, death with the pipeline);
  :mod:`~recipes.smoke.watchdog` is its fallback where prctl is unavailable;
* :mod:`~recipes.smoke.sandbox_service`: the code sandbox's lifecycle and counters;
* :mod:`~recipes.smoke.progress`: verl's console log -> ``step k/N, s/step, ETA``;
* :mod:`~recipes.smoke.report`: ``summary.json`` and the final table;
* :mod:`~recipes.smoke.toolcheck`: the tool-call check of the SFT model;
* :mod:`~recipes.smoke.bench_learn`: the learning check's sensitivity bench (``scripts/bench_learn.sh``), with the
  switches that break it in :mod:`~recipes.smoke.sabotage` (off unless asked for);
* :mod:`~recipes.smoke.tiny_model`, :mod:`~recipes.smoke.make_data`: the tiny offline-built model and inputs
  (:mod:`~recipes.smoke.offline_tokenizer`: the real Qwen tokenizer; :mod:`~recipes.smoke.build_cache`: their cache).
"""
