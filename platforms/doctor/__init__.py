"""The doctor (``retool-doctor``): checks a machine before a ReTool run, and says how to fix what is wrong.

Why: on Ascend the expensive failures are silent or far from their cause (a CANN env not sourced before
``ray start`` makes Ray count 10 of 16 A3 dies; ``VLLM_ASCEND_ENABLE_NZ`` garbles rollouts after weight sync; a
vllm-ascend that no longer reads a variable ignores it; collectives bound to the wrong NIC hang a multi-node run).
Each check turns one of them into a line with a fix, before a day of NPU time is spent.

Design:

* Every machine read goes through :class:`~platforms.doctor.probes.Probes` (environment, /dev root, CANN root,
  npu-smi binary, Ray resources, the Python path used for package metadata, ``ip addr`` and the route), so tests can
  stand up a whole fake A3 node and plant one fault at a time.
* No torch / torch_npu / vLLM / Ray import at module level, and versions come from package metadata, not imports:
  the doctor must run where those are broken (only the platform check imports torch, guarded, to ask
  torch.distributed for the platform's backend). The platform, profiles, stacks and env rules come from
  :mod:`platforms` and versions from :mod:`platforms.pins`; nothing here keeps a second copy or
  branches on a platform's name.
* Exit status 0 unless a check FAILs (WARN does not fail), 2 for usage errors.

Layout:

* :mod:`~platforms.doctor.probes`: the types (Probes, Options, Context, Result, Report, ok/warn/fail helpers);
* :mod:`~platforms.doctor.host`: platform (and its distributed backend), CANN, npu-smi;
* :mod:`~platforms.doctor.network`: the interface that carries this node's address vs the socket-ifname variables;
* :mod:`~platforms.doctor.stack`: versions against pins.env, verl's patch series;
* :mod:`~platforms.doctor.run`: Ray's device count, env, sandbox, paths, disk;
* :mod:`~platforms.doctor.cli`: the registry of check groups (name -> check, profiles it applies to), the table,
  ``main``.

CLI (``retool-doctor`` or ``python -m platforms.doctor``)::

    retool-doctor [--phase sft|rl] [--profile|--hw PROFILE] [--json] [--only GROUP,...] [--verbose]
                  [--sandbox-url URL (default $RETOOL_SANDBOX_URL)] [--model DIR] [--data FILE ...]
                  [--ckpt-dir DIR] [--min-free-gb N] [--node-ip ADDR]
                  [--dev-root DIR] [--cann-root DIR] [--npu-smi PATH] [--patches-dir DIR]
                  [--ray-resources-json FILE] [--ray-address ADDR] [--ip-addr-file FILE]
"""
