"""The ``fpsim`` command with its standard output closed: one error line and exit status 2, never
lines silently dropped."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.both_backends  # every test here runs on numpy and numpy-f32 (conftest.py)


def test_closed_stdout_is_an_error():
    import subprocess
    import sys

    # started with stdout closed (`fpsim formats >&-`): Python has no sys.stdout, print() would drop every line
    r = subprocess.run(["sh", "-c", f'"{sys.executable}" -m fpsim formats >&-'], stderr=subprocess.PIPE, timeout=60)
    assert r.returncode == 2 and r.stderr == b"fpsim formats: error: standard output is closed; nothing would be seen\n"
    # closed after start: the write fails (EBADF), one line, exit 2
    r = subprocess.run([sys.executable, "-c", "import sys, os; os.close(1); from fpsim.tools.cli import main; "
                        "sys.exit(main(['formats']))"], stderr=subprocess.PIPE, timeout=60)
    assert r.returncode == 2 and r.stderr == b"fpsim formats: error: [Errno 9] Bad file descriptor\n"
    r = subprocess.run([sys.executable, "-m", "fpsim", "formats"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       timeout=60)
    assert r.returncode == 0
