"""The main job's ``--help`` epilog (``bash scripts/smoke.sh --help``): what runs, where it runs, what it leaves,
and how long it takes, each time naming its record in docs/measurements/ (tests/test_measurements.py holds them equal).

Apart from :mod:`recipes.smoke.cli` so that module stays about options and checks.
"""

EPILOG = """\
Stages: model -> data -> SFT -> merge -> tool-call check -> sandbox -> RL -> eval -> plots (-> learn), with the real
trainers. Default: the learning check on SmolLM2-135M-Instruct (built from the pinned PyPI wheel once; 9.9 min on 2
CPU cores, docs/measurements/learn_speed.yaml; judged: exit 1 with "did NOT learn" when validation accuracy and
tool use do not rise); --fast/--tiny: the pipeline check on a tiny random model (no downloads). Prints a final
table (stage, ok/failed, seconds, key metric) and writes OUT/summary.json; exits non-zero naming the failed stage.
The sandbox and every trainer are stopped at the end whatever happens, and die with the run even if it is killed.

Platform: auto detects it (KIT_DEVICE forces one). On cpu the run uses the kit's .venv (built or updated first), or
inside the kit's CPU image (docker/run_cpu.sh) the image's Python; on npu or cuda it uses this interpreter (the
image's Python: KIT_PYTHON, else python3) with the platform's own hardware profile (KIT_HW, else this machine's),
environment and one device, at the tiny "smoke" scale: a "does my stack work" check. --dry-run prints every
command and its environment and starts nothing.

Artifacts: OUT/logs/<stage>.log, OUT/data/*.parquet, OUT/sft/{ckpt,hf_merged,tensorboard},
OUT/rl/{ckpt,tensorboard,val_generations,rollouts}, OUT/eval/eval.{md,json}, OUT/plots/*.png, OUT/summary.json.
Measured with --fast on 2 CPU cores (fp32): 308 s, of which SFT 160 s (96 steps, 1.2 s/step) and RL 109 s (vLLM's
CPU build, first step 96 s into the stage, then ~12 s a step: docs/measurements/fast_pipeline.yaml); the learning
check: 9.9 min (docs/measurements/learn_speed.yaml; docs/main-job.md).
"""
