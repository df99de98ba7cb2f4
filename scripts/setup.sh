#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian machine: .venv/ in the repo root with CPU torch and every
# extra the tests need, plus Debian's chromium-headless-shell. Safe to rerun; it skips what is there.
#
#   bash scripts/setup.sh            # everything (data, rollout, rl, dev)
#   WEBGYM_EXTRAS=data,dev bash scripts/setup.sh
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
extras="${WEBGYM_EXTRAS:-all}"
python="${PYTHON:-python3}"
torch_version="2.13.0"
chromium="/usr/lib/chromium/chromium-headless-shell"

log() { printf '[setup] %s\n' "$*" >&2; }

if [ ! -x "$chromium" ]; then
    log "installing chromium-headless-shell (Debian)"
    sudo_cmd=""
    [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
    $sudo_cmd apt-get update -q
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -q chromium-headless-shell
fi

if [ ! -x .venv/bin/python ]; then
    log "creating .venv with $($python --version)"
    "$python" -m venv .venv
fi
pip=(.venv/bin/python -m pip --disable-pip-version-check -q)

# torch first, pinned: any later requirement on torch is then already satisfied, so pip never
# resolves a multi-GB CUDA build from the index.
if ! .venv/bin/python -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$torch_version')" 2>/dev/null; then
    log "installing torch==$torch_version (CPU build)"
    "${pip[@]}" install "torch==$torch_version"
fi

log "installing webgym[$extras] (editable)"
"${pip[@]}" install -e ".[$extras]"

installed_torch="$(.venv/bin/python -c 'import torch; print(torch.__version__)')"
case "$installed_torch" in
    "$torch_version"*) ;;
    *) log "error: torch $installed_torch was installed instead of $torch_version"; exit 1 ;;
esac
if .venv/bin/python -c 'import torch, sys; sys.exit(0 if torch.version.cuda else 1)'; then
    log "error: a CUDA torch build was installed; remove .venv and rerun"; exit 1
fi
log "ready: $(.venv/bin/python --version), torch $installed_torch, $("$chromium" --version 2>/dev/null || echo 'chromium ?')"
