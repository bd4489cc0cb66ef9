#!/usr/bin/env bash
# Fuzz smoke run (issue 6): builds the libFuzzer targets of tests/fuzz with
# clang into build-fuzz, makes their seed corpora from real files, replays
# every committed crash-regression input (tests/fuzz/regressions/<target>/),
# then fuzzes each target for SECONDS (default 30), one at a time. Fails on
# any crash, leak, sanitizer report or timeout; prints the executions each
# target reached. Crashing inputs land in build-fuzz/artifacts/<target>/:
# once fixed, commit them under tests/fuzz/regressions/<target>/.
#
# usage: scripts/fuzz-smoke.sh [SECONDS]
#   env: MMGPT_FUZZ_JOBS (default 2), MMGPT_FUZZ_SEED, MMGPT_FUZZ_BUILD_DIR (default build-fuzz)
set -euo pipefail

seconds="${1:-30}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${MMGPT_FUZZ_BUILD_DIR:-$root/build-fuzz}"
targets=(fuzz_mmgpt_file fuzz_pickle fuzz_zip fuzz_torch_checkpoint fuzz_safetensors
         fuzz_bpe_files fuzz_meta_pkl fuzz_gpt2_bpe fuzz_chat_template fuzz_tokenizer_json fuzz_tiktoken fuzz_grammar fuzz_token_ids fuzz_completion_request fuzz_hf_config
         fuzz_shard_index)

command -v clang++ >/dev/null || { echo "fuzz-smoke: clang++ not found (scripts/setup.sh installs it)" >&2; exit 1; }
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DMMGPT_FUZZ=ON -DMMGPT_BUILD_TESTS=OFF -DMMGPT_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j"${MMGPT_FUZZ_JOBS:-2}" --target mmgpt "${targets[@]}"

/usr/bin/python3 "$root/tests/fuzz/make_seeds.py" --mmgpt "$build/mmgpt" --out "$build/seeds"

# Leaks are findings too; a single input taking over 10 s is a hang.
opts=(-timeout=10 -rss_limit_mb=2048 -print_final_stats=1)
# MMGPT_FUZZ_SEED fixes libFuzzer's random seed, so CI's short smoke run explores
# the same inputs every time (a finding there is then reproducible, not luck).
[ -n "${MMGPT_FUZZ_SEED:-}" ] && opts+=(-seed="$MMGPT_FUZZ_SEED")
failed=()
declare -A execs
for t in "${targets[@]}"; do
  bin="$build/tests/fuzz/$t"
  regress="$root/tests/fuzz/regressions/$t"
  if [ -d "$regress" ] && [ -n "$(ls -A "$regress")" ]; then
    echo "== $t: replaying $(ls "$regress" | wc -l) regression input(s)"
    "$bin" "${opts[@]}" "$regress"/* >"$build/$t.regressions.log" 2>&1 \
      || { echo "   FAILED (see $build/$t.regressions.log)"; tail -30 "$build/$t.regressions.log"; failed+=("$t(regression)"); }
  fi
  echo "== $t: fuzzing for ${seconds}s"
  corpus="$build/corpus/$t"
  mkdir -p "$corpus" "$build/artifacts/$t"
  log="$build/$t.log"
  if "$bin" "${opts[@]}" -max_total_time="$seconds" -artifact_prefix="$build/artifacts/$t/" \
       "$corpus" "$build/seeds/$t" >"$log" 2>&1; then
    :
  else
    echo "   FAILED (see $log)"; tail -40 "$log"; failed+=("$t")
  fi
  execs[$t]="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
done

printf '\n%-24s %14s %s\n' target executions result
for t in "${targets[@]}"; do
  r=ok
  for f in "${failed[@]}"; do [[ "$f" == "$t" || "$f" == "$t(regression)" ]] && r=FAILED; done
  printf '%-24s %14s %s\n' "$t" "${execs[$t]:-?}" "$r"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz-smoke: failures: ${failed[*]}" >&2
  exit 1
fi
