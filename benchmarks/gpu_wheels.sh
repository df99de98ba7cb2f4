#!/usr/bin/env bash
# Download the wheels benchmarks/gpu_check.py needs on the GPU machine (Python 3.12, x86-64, no
# internet) into .whl/ at the repository root: the project's dependencies on the training and
# serving path that the machine's image lacks. Run it here, where PyPI is reachable, then carry .whl
# to the machine and install there as gpu_check.py's docstring says.
#
#   benchmarks/gpu_wheels.sh                  # the wheels the check needs (about 4 MiB)
#   benchmarks/gpu_wheels.sh --project-versions
#       # also transformers, huggingface-hub, peft, accelerate, click at the versions the project is
#       # tested with (about 18 MiB more), for when the image's older transformers fails the check
#
# .whl/ must stay out of git: add "/.whl/" to .git/info/exclude (this script only reminds you).
set -euo pipefail

cd "$(dirname "$0")/.."
PIP=${PIP:-}
if [ -z "$PIP" ]; then
    if [ -x .venv/bin/pip ]; then PIP=".venv/bin/pip"; else PIP="python3 -m pip"; fi
fi

# The missing wheels, one version each (two versions of one package stop the install there).
CORE=(
    datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
    pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
    typing-extensions==4.16.0
    fastapi==0.165.0 starlette==1.10.0 opentelemetry-api==1.45.3
)
PROJECT_VERSIONS=(
    transformers==5.25.0 huggingface-hub==2.4.0 httpx2==2.17.0 httpcore2==2.17.0 truststore==0.10.5
    kernels==0.19.1 tomlkit==0.15.3 click==8.5.1 peft==0.21.2 accelerate==1.16.0
)

wanted=("${CORE[@]}")
case "${1:-}" in
    "") ;;
    --project-versions) wanted+=("${PROJECT_VERSIONS[@]}") ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
esac

mkdir -p .whl
for spec in "${wanted[@]}"; do
    $PIP download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
        -d .whl "$spec"
done

total=$(du -cb .whl/*.whl | tail -1 | cut -f1)
echo "$(ls .whl/*.whl | wc -l) wheels in .whl/, $((total / 1024)) KiB"
if [ "$total" -gt $((64 * 1024 * 1024)) ]; then
    echo "over the 64 MiB a device call carries: remove what the check does not need" >&2
    exit 1
fi
if [ -z "$(git check-ignore .whl/ 2>/dev/null)" ]; then
    echo "note: .whl/ is not ignored by git; add it with: echo /.whl/ >> \"$(git rev-parse --git-path info/exclude)\""
fi
