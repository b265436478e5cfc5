#!/usr/bin/env bash
# Fill .whl/ (git-ignored) with what a lent GPU machine lacks to run this project: the project's own
# wheel and the dependencies its image does not hold (pydantic, ruamel.yaml, pytest-randomly,
# pytest-split), for its Python (3.12, manylinux x86_64). Nothing can be fetched there; the device
# tool carries .whl/ (`carry: [".whl"]`), and tools/gpu/run.sh installs from it with --no-index.
#   bash tools/gpu/wheels.sh [PYTHON_VERSION]
set -euo pipefail
cd "$(dirname "$0")/../.."
version="${1:-3.12}"
rm -rf .whl && mkdir -p .whl
python3 -m pip download --quiet --dest .whl --only-binary=:all: --python-version "$version" \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    "pydantic>=2.5" "ruamel.yaml>=0.18" "pytest-randomly>=3.15" "pytest-split>=0.9"
python3 -m pip wheel --quiet --no-deps --wheel-dir .whl .
du -sh .whl && ls .whl
