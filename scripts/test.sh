#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite. Extra arguments go to pytest:
#   bash scripts/test.sh                 # everything
#   bash scripts/test.sh -m "not slow"   # skip the long tests
#   bash scripts/test.sh tests/webgym_data
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
bash scripts/setup.sh
export OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
# CI=true: no colour codes, a report of the slowest tests.
extra=()
if [ "${CI:-}" = "true" ]; then
    extra+=(-p no:cacheprovider --color=no --durations=15)
fi
set +e
.venv/bin/python -m pytest "${extra[@]}" "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    echo "error: pytest collected no tests" >&2
    exit 1
fi
exit "$rc"
