"""Helpers the tests share: real servers on 127.0.0.1 that stand in at a boundary (scripted OpenAI
endpoint, offline Hub), tiny model checkpoints, the known-answer bandit, untrusted-input corpora,
fuzzers and old-schema writers. Fixtures live in the conftest.py files; these are plain modules."""
