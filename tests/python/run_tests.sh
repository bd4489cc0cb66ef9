#!/usr/bin/env bash
# The Python package's tests (ctest's python_package): the checkout installed
# with the README's one offline command into a fresh venv over Debian's
# python3 (--system-site-packages: numpy, torch, pytest, dask), then pytest
# on tests/python against the installed package and the mmgpt binary.
#   run_tests.sh SOURCE_DIR WORK_DIR MMGPT_BINARY [pytest arguments]
set -euo pipefail
src=$1 work=$2 cli=$3
shift 3
rm -rf "$work"
mkdir -p "$work"
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
MMGPT_PY_BUILD_DIR="$work/build" "$work/venv/bin/pip" install --no-build-isolation --no-index --no-deps -q "$src"
cd "$work"  # away from the source tree: `import mmgpt` is the installed package
MMGPT_CLI=$cli "$work/venv/bin/python" -m pytest -q -p no:cacheprovider "$src/tests/python" "$@"
