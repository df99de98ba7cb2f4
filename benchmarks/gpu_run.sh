#!/usr/bin/env bash
# Run benchmarks/gpu_check.py on the GPU machine: install the carried wheels, stop if that fails,
# then run the check with its report and its whole log in $OUT. From the repository root there:
#
#   bash benchmarks/gpu_run.sh [gpu_check.py arguments]
#
# The wheels (benchmarks/gpu_wheels.sh downloads them here) are installed with pip into $SITE and put
# first on PYTHONPATH. The run stops with exit status 3, before the check starts, when pip fails or
# when a wheel's .dist-info is not in $SITE afterwards: a check run on the image's packages instead
# would waste the run. No .whl folder: the image's packages are used as they are.
#
# Settings (environment): OUT (default ./gpu-out), WHEELS (.whl), SITE (/tmp/site), PYTHON (python3).
# The check always gets --json $OUT/gpu_check.json, then the arguments given (none: --require-cuda);
# its whole log goes to $OUT/gpu_check.log as well as to the output.
set -euo pipefail

cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
WHEELS=${WHEELS:-.whl}
SITE=${SITE:-/tmp/site}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"

say() { echo "[gpu_run $(date +%H:%M:%S)] $*" >&2; }

if [ -d "$WHEELS" ]; then
    shopt -s nullglob
    wheels=("$WHEELS"/*.whl)
    shopt -u nullglob
    if [ "${#wheels[@]}" -eq 0 ]; then
        say "FAILED: $WHEELS holds no wheels (run benchmarks/gpu_wheels.sh here and carry $WHEELS)"
        exit 3
    fi
    say "installing ${#wheels[@]} wheels from $WHEELS into $SITE"
    if ! "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --disable-pip-version-check --target "$SITE" "${wheels[@]}"; then
        say "FAILED: pip could not install the wheels in $WHEELS (its message is above); the check did not run"
        exit 3
    fi
    # Each wheel NAME-VERSION-*.whl leaves NAME-VERSION.dist-info behind: check that every one did.
    missing=()
    for wheel in "${wheels[@]}"; do
        base=$(basename "$wheel")
        IFS=- read -r name version _ <<<"$base"
        [ -d "$SITE/$name-$version.dist-info" ] || missing+=("$name $version")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        say "FAILED: not installed in $SITE: ${missing[*]}; the check did not run"
        exit 3
    fi
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
    say "installed: ${#wheels[@]} wheels in $SITE, first on PYTHONPATH"
else
    say "no $WHEELS folder: running on the image's packages"
fi

if [ "$#" -eq 0 ]; then
    set -- --require-cuda
fi
say "df: $(df -h /dev/shm "${TMPDIR:-/tmp}" 2>/dev/null | tail -n +2 | awk '{print $6 " " $4 " free"}' | paste -sd ';' -)"
export PYTHONUNBUFFERED=1
"$PYTHON" benchmarks/gpu_check.py --json "$OUT/gpu_check.json" "$@" 2>&1 | tee "$OUT/gpu_check.log"
