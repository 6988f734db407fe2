"""The SandboxFusion ``/run_code`` wire format: request validation and response construction.

Field names, defaults and status semantics follow SandboxFusion's ``sandbox/server/sandbox_api.py`` so verl 0.6.1's
client (raw ``requests``) and the PyPI ``sandbox-fusion`` client work unchanged.
"""

from __future__ import annotations

import base64
import binascii
import posixpath
import socket
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

SUPPORTED_LANGUAGES = ("python",)
#: Languages SandboxFusion knows; we answer those with a clear "not supported here" instead of a generic 422.
SANDBOX_FUSION_LANGUAGES = (
    "python",
    "cpp",
    "nodejs",
    "go",
    "go_test",
    "java",
    "php",
    "csharp",
    "bash",
    "typescript",
    "sql",
    "rust",
    "cuda",
    "lua",
    "R",
    "perl",
    "D_ut",
    "ruby",
    "scala",
    "julia",
    "pytest",
    "junit",
    "kotlin_script",
    "jest",
    "verilog",
    "python_gpu",
    "lean",
    "swift",
    "racket",
)
_POD_NAME = socket.gethostname()


class RunCodeRequest(BaseModel):
    """Body of ``POST /run_code`` (unknown fields are ignored, as SandboxFusion does)."""

    model_config = ConfigDict(extra="ignore")

    code: str
    language: str = "python"
    compile_timeout: float = Field(default=10.0, ge=0)
    run_timeout: float = Field(default=10.0, gt=0)
    memory_limit_MB: int = -1
    stdin: str | None = None
    files: dict[str, str | None] = Field(default_factory=dict)
    fetch_files: list[str] = Field(default_factory=list)

    @field_validator("files")
    @classmethod
    def _files_are_relative_base64(cls, files: dict[str, str | None]) -> dict[str, str | None]:
        for path, content in files.items():
            check_relative_path(path)
            if content:
                try:
                    base64.b64decode(content, validate=True)
                except (binascii.Error, ValueError) as exc:
                    raise ValueError(f"files[{path!r}] is not valid base64") from exc
        return files

    @field_validator("fetch_files")
    @classmethod
    def _fetch_files_are_relative(cls, names: list[str]) -> list[str]:
        for name in names:
            check_relative_path(name)
        return names


def check_relative_path(path: str) -> None:
    """A file path must stay inside the request's directory."""
    if not path or path.startswith("/") or "\x00" in path:
        raise ValueError(f"file path {path!r} must be relative")
    if posixpath.normpath(path).split("/")[0] == "..":
        raise ValueError(f"file path {path!r} leaves the sandbox directory")


def overall_status(run_result: dict[str, Any] | None) -> str:
    """SandboxFusion's ``parse_run_status``: Error → SandboxError; timeout or non-zero exit → Failed."""
    if run_result is None or run_result["status"] == "Error":
        return "SandboxError"
    if run_result["status"] == "TimeLimitExceeded" or run_result["return_code"] != 0:
        return "Failed"
    return "Success"


def run_code_response(
    run_result: dict[str, Any] | None, message: str = "", files: dict[str, str | None] | None = None
) -> dict[str, Any]:
    return {
        "status": overall_status(run_result),
        "message": message,
        "compile_result": None,
        "run_result": run_result,
        "executor_pod_name": _POD_NAME,
        "files": files or {},
    }


def error_response(message: str) -> dict[str, Any]:
    """A SandboxError body for requests that never ran (bad input, overload, internal failure)."""
    return run_code_response(None, message)
