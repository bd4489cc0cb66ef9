#!/usr/bin/env bash
# The main job on a fresh machine: set up, build, convert the bundled demo
# checkpoint (a character-level GPT trained on Shakespeare) and generate text.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh --mmgpt
./build/mmgpt convert models/demo/ckpt.pt -o build/demo.mmgpt
./build/mmgpt generate -m build/demo.mmgpt -p "ROMEO:" -n 400 --seed 1337 "$@"
