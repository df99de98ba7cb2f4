"""webgym_core.lazy: a package's names import on first use."""

from __future__ import annotations

import subprocess
import sys


def test_names_import_on_first_use_and_unknown_names_raise():
    code = ("import sys, webgym_rl\n"
            "assert 'webgym_rl.train' not in sys.modules\n"
            "assert 'train' in dir(webgym_rl) and 'TrainSettings' in dir(webgym_rl)\n"
            "from webgym_rl import TrainSettings\n"
            "assert 'webgym_rl.train' in sys.modules and webgym_rl.TrainSettings is TrainSettings\n"
            "try:\n    webgym_rl.nothing\nexcept AttributeError as e:\n    print(e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "module 'webgym_rl' has no attribute 'nothing'"
