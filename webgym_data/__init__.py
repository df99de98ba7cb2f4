"""webgym_data: build, extend and version the WebGym task set as Hugging Face datasets."""

__version__ = "0.1.0"
