"""webgym_rl: an Accelerate-based RL trainer for VLM web agents on trajectory datasets."""

__version__ = "0.1.0"
