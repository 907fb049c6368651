"""The test suite's progress shows a time estimate on a terminal, and nothing extra elsewhere."""

import os
import pty
import subprocess
import sys
from pathlib import Path

from suite_progress import with_estimate

ROOT = Path(__file__).resolve().parents[1]


def test_the_estimate_is_the_pace_so_far_times_what_is_left():
    assert with_estimate(" [ 25%]", 25, 100, 10.0) == " [ 25%, ~30s left]"
    assert with_estimate(" [ 10%]", 10, 100, 20.0) == " [ 10%, ~3m00s left]"
    assert with_estimate(" [100%]", 100, 100, 9.0) == " [100%]"        # done: nothing left to estimate
    assert with_estimate(" [ 3/10]", 3, 10, 1.0) == " [ 3/10]"          # another style: as it is


def _suite_output(tmp_path, terminal: bool) -> str:
    """`pytest -q` over two small test files, its output read from a terminal or a pipe."""
    for name in ("test_a.py", "test_b.py"):
        (tmp_path / name).write_text("import time\n\ndef test_one():\n    time.sleep(0.05)\n\n"
                                     "def test_two():\n    time.sleep(0.05)\n")
    (tmp_path / "conftest.py").write_text(
        f"import sys\nimport pytest\nsys.path.insert(0, {str(ROOT / 'tests')!r})\nimport suite_progress\n\n"
        "@pytest.hookimpl(trylast=True)\ndef pytest_configure(config):\n    suite_progress.install(config)\n")
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "test_a.py", "test_b.py"]
    env = {**os.environ, "COLUMNS": "80", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    if not terminal:
        return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env).stdout
    leader, follower = pty.openpty()
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=follower, stderr=follower, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:             # the pty closed with the process
            break
        if not chunk:
            break
        chunks.append(chunk)
    proc.wait(timeout=120)
    os.close(leader)
    return b"".join(chunks).decode(errors="replace")


def test_a_terminal_sees_the_time_left_and_a_pipe_sees_plain_progress(tmp_path):
    out = _suite_output(tmp_path, terminal=True)
    assert " [ 50%, ~" in out and "s left]" in out, out
    piped = _suite_output(tmp_path, terminal=False)
    assert " [ 50%]" in piped and "left]" not in piped, piped
