"""webgym: the umbrella of the toolkit: the end-to-end demo (`webgym demo`) and shared CLI plumbing.

The three working packages are `webgym_data`, `webgym_rollout` and `webgym_rl`.
"""

__version__ = "0.1.0"
