#!/usr/bin/env bash
# Writes the outputs a refactoring must leave byte-identical into OUTDIR, so that two snapshots
# (before and after a change) compare with `diff -r`:
#   simulate --json and memory --json of every example config (plans/examples/, ../shared/examples/),
#   simulate --json of each shipped bundle's plan TOML (plans/*/), validate --json of the
#   validation CSVs in ../shared/validation, the Chrome traces of two examples, and the exit
#   status of tests/regen_plans.sh --check and tests/regen_docs.sh --check.
# Wall-clock fields (search_seconds, sim_ms, wall_s) are replaced by 0 so that only the model's
# figures are compared. Data under ../shared is skipped when that folder is absent. The 1024-GPU
# 405B bundle takes about half a minute to simulate and is skipped unless GOLDEN_SLOW=1.
#
# usage: tests/golden_snapshot.sh OUTDIR      (binary: $MESHPLAN_BIN, else build/meshplan)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bin="${MESHPLAN_BIN:-$root/build/meshplan}"
[[ $# -eq 1 ]] || { echo "usage: tests/golden_snapshot.sh OUTDIR" >&2; exit 2; }
[[ -x "$bin" ]] || { echo "golden_snapshot: no meshplan binary at $bin (set MESHPLAN_BIN)" >&2; exit 2; }
out="$1"
mkdir -p "$out"
shared="$root/../shared"

# Runs the binary, stores stdout (wall-clock fields zeroed), stderr and the exit status.
snap() {
  local name="$1"; shift
  local rc=0
  "$bin" "$@" > "$out/$name.out" 2> "$out/$name.err" || rc=$?
  sed -i -E 's/("(search_seconds|sim_ms|wall_s)": *)[-0-9.eE+]+/\10/g' "$out/$name.out"
  # The trace path printed by --trace names OUTDIR itself.
  sed -i "s|$out|OUTDIR|g" "$out/$name.out" "$out/$name.err"
  echo "$rc" > "$out/$name.rc"
}
# A file name as a flat snapshot name: plans/examples/a.toml -> plans_examples_a.toml
flat() { local p="${1#"$root"/}"; p="${p#../}"; echo "${p//\//_}"; }

configs=(plans/examples/*)
if [[ -d "$shared/examples" ]]; then
  while IFS= read -r f; do configs+=("$f"); done < <(find "$shared/examples" -type f \( -name '*.toml' -o -name '*.yaml' \) | sort)
else
  echo "golden_snapshot: ../shared/examples absent, skipping its configs" >&2
fi
for f in "${configs[@]}"; do
  n="$(flat "$f")"
  snap "simulate.$n" simulate --json -c "$f"
  snap "memory.$n" memory --json -c "$f"
done
# The shared examples again on several nodes (their own mesh defaults to one node).
if [[ -d "$shared/examples" ]]; then
  while IFS= read -r f; do
    n="$(flat "$f")"
    snap "simulate64.$n" simulate --json -c "$f" --gpus 64
  done < <(find "$shared/examples" -type f \( -name '*.toml' -o -name '*.yaml' \) | sort)
fi

for f in plans/*/*.toml; do
  [[ "$f" == plans/examples/* ]] && continue
  if [[ "$f" == plans/llama3.1-405b-1024xh100/* && "${GOLDEN_SLOW:-0}" != 1 ]]; then
    echo "golden_snapshot: skipping $f (slow; GOLDEN_SLOW=1 includes it)" >&2
    continue
  fi
  snap "simulate.$(flat "$f")" simulate --json -c "$f"
done

if [[ -d "$shared/validation" ]]; then
  for v in dev memory dev-vtrain dev-moe; do
    [[ -f "$shared/validation/$v.csv" ]] && snap "validate.$v" validate --json "$shared/validation/$v.csv"
  done
else
  echo "golden_snapshot: ../shared/validation absent, skipping validate" >&2
fi

snap trace.llama3.1-8b-fsdp simulate -c plans/examples/llama3.1-8b-fsdp-h100.toml --trace "$out/trace.llama3.1-8b-fsdp.json"
snap trace.llama3.1-70b-pp4-tp8 simulate -c plans/examples/plan-llama3.1-70b-pp4-tp8.toml --trace "$out/trace.llama3.1-70b-pp4-tp8.json"

rc=0; MESHPLAN_BIN="$bin" tests/regen_plans.sh --check > "$out/regen_plans.log" 2>&1 || rc=$?
echo "$rc" > "$out/regen_plans.rc"
rc=0; MESHPLAN_BIN="$bin" tests/regen_docs.sh --check > "$out/regen_docs.log" 2>&1 || rc=$?
echo "$rc" > "$out/regen_docs.rc"
echo "golden_snapshot: $(ls "$out" | wc -l) files in $out"
