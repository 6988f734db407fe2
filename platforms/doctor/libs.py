"""``platform.vllm_libs``: do vLLM's compiled kernels find the system libraries they link?

Why: the doctor reads package metadata without importing (probes.py), so it said "RL rollout: vllm 0.11.0+cpu" in
the first CPU image while ``vllm._C`` could not load (``libnuma.so.1: cannot open shared object file``, a Debian
package the slim base lacks); vLLM only logged a warning on import, and the RL stage died minutes later in the
engine's init_device. ``ldd`` on the package's own shared objects finds that in a second, without importing torch.
"""

from __future__ import annotations

import importlib.machinery
import shutil
import subprocess
from pathlib import Path

from platforms.doctor.probes import Context, Result, fail, ok

#: torch's own libraries: loaded by torch's import before vLLM's, whatever ldd finds on its own (the doctor may read a
#: torch it did not install, or a stub of one).
TORCH_LIBRARIES = ("libtorch", "libc10", "libshm")
#: Debian/Ubuntu packages of the libraries vLLM's kernels are known to link, for the fix line.
PACKAGES = {"libnuma.so.1": "libnuma1", "libgomp.so.1": "libgomp1", "libtcmalloc_minimal.so.4": "libtcmalloc-minimal4"}


def _package_dir(name: str, search_path: list[str] | None) -> Path | None:
    spec = importlib.machinery.PathFinder.find_spec(name, search_path)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def missing_libraries(objects: list[Path], path_env: str | None, lib_dirs: list[Path]) -> list[str]:
    """Libraries ``ldd`` reports as ``not found`` for any of ``objects``, with ``lib_dirs`` (torch's own libraries,
    which torch's import loads before vLLM's) on the search path; empty without ldd: nothing to say."""
    ldd = shutil.which("ldd", path=path_env)
    if ldd is None:
        return []
    env = {"PATH": path_env or "", "LD_LIBRARY_PATH": ":".join(str(d) for d in lib_dirs)}
    missing: set[str] = set()
    for obj in objects:
        try:
            out = subprocess.run([ldd, str(obj)], capture_output=True, text=True, timeout=30, env=env).stdout
        except (OSError, subprocess.TimeoutExpired):
            continue
        missing.update(line.split("=>")[0].strip() for line in out.splitlines() if "not found" in line)
    return sorted(lib for lib in missing if not lib.startswith(TORCH_LIBRARIES))


def check_vllm_libraries(ctx: Context) -> list[Result]:
    vllm = _package_dir("vllm", ctx.probes.search_path)
    objects = sorted(vllm.glob("_C*.so")) if vllm else []
    if not objects:
        return []
    torch = _package_dir("torch", ctx.probes.search_path)
    missing = missing_libraries(objects, ctx.probes.env.get("PATH"), [torch / "lib"] if torch else [])
    names = ", ".join(obj.name for obj in objects)
    if missing:
        packages = " ".join(dict.fromkeys(PACKAGES.get(lib, lib) for lib in missing))
        return [
            fail(
                "platform.vllm_libs",
                f"vLLM's kernels ({names}) cannot load: {', '.join(missing)} not found; its engine dies at start-up",
                f"install the system libraries (Debian/Ubuntu: apt-get install {packages})",
                missing=missing,
            )
        ]
    return [ok("platform.vllm_libs", f"vLLM's kernels ({names}) find every library they link")]
