"""The code sandbox: limits hold, writes outside the folder and network are refused, tests grade."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopwright.cookbook.code_problems import PROBLEMS
from loopwright.cookbook.code_tasks import NO_CODE_REWARD, CodeProblem, grade
from loopwright.cookbook.sandbox import SandboxLimits, network_namespace_available, run_tests

LIMITS = SandboxLimits(timeout_s=6.0, cpu_s=2, memory_mb=256, file_size_mb=1)
TESTS = ["assert add(1, 2) == 3", "assert add(5, 0) == 5"]


def test_a_passing_solution_passes() -> None:
    report = run_tests("def add(a, b):\n    return a + b\n", TESTS, LIMITS)
    assert report.passed == [True, True] and report.all_passed
    assert report.loaded and not report.timed_out and not report.crashed
    assert "2/2 tests passed" in report.summary(TESTS)


def test_a_failing_solution_fails_with_the_reason() -> None:
    report = run_tests("def add(a, b):\n    return a - b\n", TESTS, LIMITS)
    assert report.passed == [False, True]
    assert "AssertionError" in report.errors[0]
    assert "FAIL: assert add(1, 2) == 3" in report.summary(TESTS)


def test_an_error_in_the_solution_fails_every_test() -> None:
    report = run_tests("def add(a, b) return a\n", TESTS, LIMITS)
    assert report.passed == [False, False] and not report.loaded
    assert "SyntaxError" in report.errors[0]


def test_code_that_loops_forever_is_stopped() -> None:
    report = run_tests("while True:\n    pass\n", TESTS, LIMITS)
    assert not report.all_passed
    assert report.crashed  # the CPU-time limit (or the wall clock) ends it
    assert report.duration_s < LIMITS.timeout_s + 5


def test_code_that_sleeps_forever_hits_the_wall_clock() -> None:
    limits = SandboxLimits(timeout_s=1.5, cpu_s=2, memory_mb=256)
    report = run_tests("import time\ntime.sleep(60)\n", TESTS, limits)
    assert report.timed_out and not report.all_passed
    assert "Time limit" in report.summary(TESTS)


def test_code_that_allocates_too_much_is_refused() -> None:
    report = run_tests("x = bytearray(2 * 1024 ** 3)\n", TESTS, LIMITS)
    assert not report.all_passed and "MemoryError" in report.errors[0]
    growing = "xs = []\nwhile True:\n    xs.append(bytearray(10 ** 7))\n"
    assert not run_tests(growing, TESTS, LIMITS).all_passed


def test_writes_outside_the_folder_are_refused(tmp_path: Path) -> None:
    target = tmp_path / "escaped.txt"
    code = f"open({str(target)!r}, 'w').write('x')\n"
    report = run_tests(code, TESTS, LIMITS)
    assert not target.exists()
    assert "PermissionError" in report.errors[0]
    for escape in (
        f"import os\nos.open({str(target)!r}, os.O_WRONLY | os.O_CREAT)\n",
        "import os\nos.symlink('/tmp', 'link')\nopen('link/escaped-via-link.txt', 'w')\n",
        f"import os\nos.rename('spec.json', {str(target)!r})\n",
    ):
        assert "PermissionError" in run_tests(escape, TESTS, LIMITS).errors[0], escape
        assert not target.exists()
    assert not Path("/tmp/escaped-via-link.txt").exists()


def test_writes_inside_the_folder_work_and_home_is_the_folder() -> None:
    code = (
        "import os\nopen('notes.txt', 'w').write('ok')\n"
        "assert os.environ['HOME'] == os.getcwd()\n"
        "def add(a, b):\n    return a + b\n"
    )
    assert run_tests(code, TESTS, LIMITS).all_passed


def test_big_files_hit_the_size_limit() -> None:
    code = "open('big.bin', 'wb').write(b'0' * (4 * 1024 * 1024))\n"
    report = run_tests(code, TESTS, LIMITS)
    assert not report.loaded and "File too large" in report.errors[0]


def test_sockets_and_processes_are_refused() -> None:
    for code in (
        "import socket\nsocket.create_connection(('127.0.0.1', 80), timeout=1)\n",
        "import socket\nsocket.socket()\n",
        "import subprocess\nsubprocess.run(['true'])\n",
        "import os\nos.system('true')\n",
    ):
        report = run_tests(code, TESTS, LIMITS)
        assert "PermissionError" in report.errors[0], (code, report.errors)


def test_the_network_namespace_is_used_where_available() -> None:
    report = run_tests("def add(a, b):\n    return a + b\n", TESTS, LIMITS)
    assert ("network-namespace" in report.isolation) == network_namespace_available()
    assert {"rlimits", "audit-hook"} <= set(report.isolation)


def test_the_solution_cannot_forge_the_report_or_read_the_tests() -> None:
    forge = "open('report.json', 'w').write('{\"loaded\": true, \"results\": []}')\n"
    assert "PermissionError" in run_tests(forge, TESTS, LIMITS).errors[0]
    peek = "import os\nassert not os.path.exists('spec.json')\ndef add(a, b):\n    return a + b\n"
    assert run_tests(peek, TESTS, LIMITS).all_passed
    exits = "import os\nos._exit(0)\n"
    report = run_tests(exits, TESTS, LIMITS)
    assert not report.all_passed and "exited before" in report.crashed


@pytest.mark.parametrize("record", PROBLEMS, ids=[p["id"] for p in PROBLEMS])
def test_every_shipped_problem_is_solved_by_its_reference(record) -> None:
    problem = CodeProblem.from_record(record)
    assert set(problem.public_tests) <= set(problem.tests)
    answer = f"Here it is:\n```python\n{record['reference']}```"
    assert grade(answer, problem, LIMITS) == (1.0, True, True)


def test_grading_rewards() -> None:
    problem = CodeProblem.from_record(PROBLEMS[0])
    assert grade("The answer is a + b.", problem, LIMITS) == (NO_CODE_REWARD, False, False)
    wrong = "```python\ndef add(a, b):\n    return 0\n```"
    assert grade(wrong, problem, LIMITS) == (0.0, False, True)


def test_shipped_problems_file_matches_the_source() -> None:
    from loopwright.cookbook.datagen import DATA_DIR

    lines = (DATA_DIR / "code_problems.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == PROBLEMS
