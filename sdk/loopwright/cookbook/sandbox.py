"""Run generated Python against unit tests in a separate, limited process.

Each run gets a fresh temporary folder as its cwd and HOME, CPU-time, memory and file-size
rlimits, a wall-clock timeout, no network (a new network namespace via ``unshare -n`` when the
machine allows it, and in any case an audit hook that refuses sockets), and an audit hook that
refuses writes outside the folder and starting processes. The audit hook stops the accidents of
generated code; it is not a boundary against code written to escape the interpreter, so run
code from untrusted sources inside a container or VM as well.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

__all__ = ["SandboxLimits", "TestReport", "network_namespace_available", "run_tests"]

_CHILD = Path(__file__).with_name("_sandbox_child.py")
_REPORT = "report.json"
_OUTPUT_LIMIT = 4000


@dataclass(frozen=True)
class SandboxLimits:
    """What one run may use."""

    timeout_s: float = 10.0
    """Wall-clock limit; the process group is killed after it."""

    cpu_s: int = 5
    """CPU-time limit (RLIMIT_CPU)."""

    memory_mb: int = 512
    """Address-space limit (RLIMIT_AS)."""

    file_size_mb: int = 8
    """Largest file it may write, output included (RLIMIT_FSIZE)."""


@dataclass
class TestReport:
    """The outcome of one run."""

    passed: list[bool]
    """Per test, whether it passed."""

    errors: list[str]
    """Per test, the error it raised ("" when it passed)."""

    loaded: bool = True
    """Whether the solution itself ran without raising."""

    timed_out: bool = False
    """Whether the wall-clock timeout killed it."""

    crashed: str = ""
    """Why no report came back (killed by a limit, exited early), else ""."""

    stdout: str = ""
    """The first characters of what it printed."""

    stderr: str = ""
    """The first characters of its error output."""

    duration_s: float = 0.0
    """Wall-clock seconds."""

    isolation: list[str] = field(default_factory=list)
    """The protections that were in force."""

    @property
    def all_passed(self) -> bool:
        """Whether every test passed (False when there were none)."""
        return bool(self.passed) and all(self.passed)

    def summary(self, tests: list[str]) -> str:
        """A short text for a model to read: each test and whether it passed."""
        if self.timed_out:
            return "Time limit exceeded: the code did not finish."
        if self.crashed:
            return f"The code crashed: {self.crashed}"
        lines = [
            f"{'PASS' if ok else 'FAIL'}: {test}" + (f"  ({error})" if error and not ok else "")
            for test, ok, error in zip(tests, self.passed, self.errors, strict=True)
        ]
        return f"{sum(self.passed)}/{len(tests)} tests passed.\n" + "\n".join(lines)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@functools.cache
def _unshare_command() -> tuple[str, ...]:
    """The prefix that runs a command without network, or () where that is not possible."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return ()
    for prefix in ((unshare, "-n"), (unshare, "-r", "-n")):
        try:
            done = subprocess.run(  # noqa: S603 — the sandbox runs its own child with fixed arguments, no shell
                [*prefix, "true"], capture_output=True, timeout=10, stdin=subprocess.DEVNULL
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0:
            return prefix
    return ()


def network_namespace_available() -> bool:
    """Whether runs get a network namespace of their own (``unshare -n`` works here)."""
    return bool(_unshare_command())


def _read_start(path: Path) -> str:
    try:
        with path.open("rb") as f:
            return f.read(_OUTPUT_LIMIT).decode("utf-8", errors="replace")
    except OSError:
        return ""


def run_tests(solution: str, tests: list[str], limits: SandboxLimits | None = None) -> TestReport:
    """Run ``solution``, then each test (a Python statement such as an assert) after it."""
    limits = limits or SandboxLimits()
    with tempfile.TemporaryDirectory(prefix="lw-sandbox-") as tmp:
        root = Path(tmp)
        spec = {
            "solution": solution,
            "tests": tests,
            "report": _REPORT,
            "limits": {
                "cpu_s": limits.cpu_s,
                "memory_mb": limits.memory_mb,
                "file_size_mb": limits.file_size_mb,
            },
        }
        (root / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
        prefix = _unshare_command()
        command = [*prefix, sys.executable, "-I", "-S", str(_CHILD), "spec.json"]
        env = {"HOME": tmp, "TMPDIR": tmp, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
        isolation = ["rlimits", "audit-hook", *(["network-namespace"] if prefix else [])]
        started = time.monotonic()
        with (root / "stdout.txt").open("wb") as out, (root / "stderr.txt").open("wb") as err:
            proc = subprocess.Popen(  # noqa: S603 — the sandbox runs its own child with fixed arguments, no shell
                command,
                cwd=tmp,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,  # its own process group, killed as a whole
            )
            timed_out = False
            try:
                proc.wait(timeout=limits.timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(proc)
        duration = time.monotonic() - started
        stdout, stderr = _read_start(root / "stdout.txt"), _read_start(root / "stderr.txt")
        report_path = root / _REPORT
        report = None
        if report_path.exists():
            try:
                report = json.loads(report_path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                report = None
        if report is None:
            crashed = "timed out" if timed_out else _why_no_report(proc.returncode, stderr)
            return TestReport(
                passed=[False] * len(tests),
                errors=[crashed] * len(tests),
                loaded=False,
                timed_out=timed_out,
                crashed=crashed,
                stdout=stdout,
                stderr=stderr,
                duration_s=duration,
                isolation=isolation,
            )
        results = report["results"]
        return TestReport(
            passed=[bool(ok) for ok, _ in results],
            errors=[str(error) for _, error in results],
            loaded=bool(report["loaded"]),
            stdout=stdout,
            stderr=stderr,
            duration_s=duration,
            isolation=isolation,
        )


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):  # it may have exited meanwhile
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _why_no_report(returncode: int | None, stderr: str) -> str:
    if returncode is not None and returncode < 0:
        name = signal.Signals(-returncode).name
        reason = {"SIGXCPU": "CPU time limit", "SIGXFSZ": "file size limit", "SIGKILL": "killed"}
        return f"{reason.get(name, name)} ({name})"
    last = stderr.strip().splitlines()[-1:] or [f"exit status {returncode}"]
    return f"exited before finishing the tests: {last[0]}"
