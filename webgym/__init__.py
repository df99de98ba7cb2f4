"""webgym: the umbrella of the toolkit: the end-to-end demo (``webgym demo``).

The working packages are `webgym_core` (settings, endpoints, files, card templates), `webgym_data`
(tasks), `webgym_rollout` (browsers, environment, policies, judges, trajectories) and `webgym_rl`
(training and the online loop); they depend one way, in that order, and `webgym` sits on top.
Each package draws its exception tree in its ``errors`` module (`webgym.errors`: `WebgymError`).
"""

__version__ = "0.2.0"
