"""The sandboxed process: set rlimits, install the audit hook, run the solution and its tests.

Started by ``sandbox.py`` as ``python -I -S _sandbox_child.py <spec.json>`` with the temporary
folder as cwd; imports only the standard library. Writes one JSON report to the results file.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import traceback
from typing import Any

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
# events whose path arguments must lie inside the folder (the mkdir/remove/rename family)
_PATH_EVENTS = {
    "os.remove": 1, "os.rmdir": 1, "os.mkdir": 1, "os.rename": 2, "os.link": 2,
    "os.symlink": 2, "os.chmod": 1, "os.chown": 1, "os.truncate": 1, "os.utime": 1,
    "shutil.rmtree": 1, "shutil.copyfile": 2, "shutil.copytree": 2, "shutil.move": 2,
}  # fmt: skip
_DENIED_PREFIXES = ("socket.", "ctypes.", "subprocess.", "os.exec", "os.spawn", "os.posix_spawn")
_DENIED = {
    "os.system",
    "os.fork",
    "os.forkpty",
    "os.kill",
    "os.killpg",
    "pty.spawn",
    "webbrowser.open",
}


def _set_limits(limits: dict[str, int]) -> None:
    memory = limits["memory_mb"] * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_s"], limits["cpu_s"] + 1))
    size = limits["file_size_mb"] * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _install_guard(root: str, protected: str, state: dict[str, bool]) -> None:
    def inside(path: Any) -> bool:
        if isinstance(path, int):
            return True  # an already open descriptor
        try:
            real = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return False
        if state["guest"] and real == protected:
            return False
        return real == root or real.startswith(root + os.sep)

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if not state["guest"]:
            return
        if event in _DENIED or event.startswith(_DENIED_PREFIXES):
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "open":
            path, mode, flags = args
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & _WRITE_FLAGS
            )
            if writes and not inside(path):
                raise PermissionError(
                    f"sandbox: writing {path!r} is not allowed (outside its folder)"
                )
        elif event in _PATH_EVENTS:
            for path in args[: _PATH_EVENTS[event]]:
                if path is not None and not inside(path):
                    raise PermissionError(f"sandbox: {event} on {path!r} outside the folder")

    sys.addaudithook(hook)


def _run(spec: dict[str, Any]) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "__solution__", "__builtins__": __builtins__}
    tests: list[str] = spec["tests"]
    try:
        exec(compile(spec["solution"], "solution.py", "exec"), namespace)  # noqa: S102 — running the model's code is this sandboxed child's whole purpose
    except BaseException as exc:
        error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        return {"loaded": False, "error": error, "results": [[False, error]] * len(tests)}
    results = []
    for index, test in enumerate(tests):
        try:
            exec(compile(test, f"test_{index}", "exec"), namespace)  # noqa: S102 — running the model's code is this sandboxed child's whole purpose
            results.append([True, ""])
        except BaseException as exc:
            message = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            results.append([False, message or type(exc).__name__])
    return {"loaded": True, "error": "", "results": results}


def main() -> None:
    spec_path = os.path.realpath(sys.argv[1])
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    os.remove(spec_path)  # the tests are not left for the solution to read
    root = os.path.realpath(os.getcwd())
    report_path = os.path.join(root, spec["report"])
    _set_limits(spec["limits"])
    state = {"guest": True}
    _install_guard(root, report_path, state)
    report = _run(spec)
    state["guest"] = False
    with open(report_path, "w", encoding="utf-8") as f:
        json.dump(report, f)
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: nothing the solution registered runs after this


if __name__ == "__main__":
    main()
