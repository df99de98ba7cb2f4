#!/usr/bin/env bash
# Set up (idempotent) and run the main job end to end on the embedded default. Today that is
# building the task dataset from the seed sets in ../shared/seeds into out/tasks/ and loading it
# back with `datasets`; rollout and training join as they land.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
bash scripts/setup.sh
seeds="${WEBGYM_SEEDS:-$repo/../shared/seeds}"
out="${WEBGYM_OUT:-$repo/out}"
.venv/bin/webgym-data build --seeds "$seeds" --out "$out/tasks"
.venv/bin/webgym-data stats "$out/tasks"
.venv/bin/python -c "import datasets, sys; print(datasets.load_dataset(sys.argv[1]))" "$out/tasks"
