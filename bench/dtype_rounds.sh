#!/bin/bash
# Rounds of `mmgpt bench` over GPT-2-shaped models in every weight dtype: the
# runs behind docs/benchmarks.md, "Reference figures". Each round benches every
# file once, one after another, each first dropped from the page cache (so it is
# read back on 2 MB pages: docs/benchmarks.md, "mmgpt bench"); results go to
# OUT_DIR/SHAPE-DTYPE-ROUND.json, and bench/dtype_table.py makes the tables.
#
#   bench/dtype_rounds.sh [options] OUT_DIR [-- BENCH_ARGS...]
#     -s SHAPES   model shapes: GPT-2 sizes or LAYERSxHEADSxWIDTH, as bench/gpt2_shaped.py
#                 takes them (default: "124M 355M")
#     -d DTYPES   weight dtypes (default: "f32 bf16 f16 q8_0 q4_0")
#     -r ROUNDS   rounds (default: 2)
#     -w DIR      where the models are written, or found from an earlier call
#                 (default: OUT_DIR/models; 124M and 355M in all dtypes: 4.7 GB, and
#                 6.1 GB at most while 355M's 1.4 GB directory is converted)
#     -m MMGPT    the mmgpt binary (default: build/mmgpt)
#   BENCH_ARGS default to: -p 1,512 -n 128 -t 1,2 -r 3
#
# Example: bench/dtype_rounds.sh /tmp/rounds && python3 bench/dtype_table.py /tmp/rounds
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
shapes="124M 355M" dtypes="f32 bf16 f16 q8_0 q4_0" rounds=2 models="" mmgpt="$here/../build/mmgpt"
usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while getopts "s:d:r:w:m:h" opt; do
  case $opt in
    s) shapes=$OPTARG ;; d) dtypes=$OPTARG ;; r) rounds=$OPTARG ;;
    w) models=$OPTARG ;; m) mmgpt=$OPTARG ;; *) usage ;;
  esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || usage
out=$1; shift
if [ $# -gt 0 ]; then
  [ "$1" = "--" ] || usage
  shift
fi
bench_args=("$@")
[ ${#bench_args[@]} -gt 0 ] || bench_args=(-p 1,512 -n 128 -t 1,2 -r 3)
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "dtype_rounds.sh: -r $rounds: need a positive whole number" >&2; exit 2; }
[ -x "$mmgpt" ] || { echo "dtype_rounds.sh: $mmgpt: no mmgpt binary (build it, or give -m)" >&2; exit 1; }
models=${models:-$out/models}
mkdir -p "$out" "$models"

# The models: a Hugging Face directory per shape, converted to each dtype.
# An existing .mmgpt is reused, so a second call benches the same files.
for s in $shapes; do
  for d in $dtypes; do
    f=$models/$s-$d.mmgpt
    [ -e "$f" ] && continue
    if [ ! -e "$models/hf-$s/model.safetensors" ]; then
      rm -rf "$models/hf-$s"
      python3 "$here/gpt2_shaped.py" "$s" "$models/hf-$s"
    fi
    # Quiet unless it fails (it names every file it writes).
    if ! log=$("$mmgpt" convert "$models/hf-$s" -o "$f" --dtype "$d" 2>&1); then
      echo "$log" >&2
      exit 1
    fi
  done
  rm -rf "$models/hf-$s"
done

for r in $(seq "$rounds"); do
  for s in $shapes; do
    for d in $dtypes; do
      f=$models/$s-$d.mmgpt
      # Out of the page cache: the bench maps it back in 2 MB pages.
      dd if="$f" iflag=nocache count=0 status=none
      echo "round $r: $s $d" >&2
      "$mmgpt" bench -m "$f" "${bench_args[@]}" --json > "$out/$s-$d-$r.json.partial"
      mv "$out/$s-$d-$r.json.partial" "$out/$s-$d-$r.json"
    done
  done
done
