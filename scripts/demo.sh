#!/usr/bin/env bash
# Set up (idempotent) and run the main job end to end on the embedded default: `webgym demo` builds
# a task dataset from the project's sample tasks and MiniWoB++ tasks, starts the site, browser and
# CPU policy servers, rolls out with the random policy, trains a tiny Qwen-VL policy, reloads it,
# rolls out again and writes HTML reports and a summary. CPU only, offline, a few minutes.
#
#   bash scripts/demo.sh                 # -> out/demo (WEBGYM_OUT=/elsewhere to change out/)
#   bash scripts/demo.sh --size tiny     # extra arguments go to `webgym demo`
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
bash scripts/setup.sh
out="${WEBGYM_OUT:-$repo/out}"
# Nothing leaves this machine: the Hub clients stay offline, torch shares the cores with Chromium.
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" TOKENIZERS_PARALLELISM=false
.venv/bin/webgym demo --out "$out/demo" "$@"
