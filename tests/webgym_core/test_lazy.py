"""webgym_core.lazy: a package's names import on first use."""

from __future__ import annotations

import subprocess
import sys


def test_names_import_on_first_use_and_unknown_names_raise():
    code = ("import sys, webgym_rl\n"
            "assert 'webgym_rl.samples' not in sys.modules\n"
            "assert 'train' in dir(webgym_rl) and 'build_samples' in dir(webgym_rl)\n"
            "from webgym_rl import build_samples\n"
            "assert 'webgym_rl.samples' in sys.modules and webgym_rl.build_samples is build_samples\n"
            "try:\n    webgym_rl.nothing\nexcept AttributeError as e:\n    print(e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "module 'webgym_rl' has no attribute 'nothing'"
