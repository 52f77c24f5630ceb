#!/usr/bin/env bash
# Regenerates the launchable bundles under plans/ for the shipped models on typical clusters, or
# with --check fails (exit 1) when a committed bundle differs from what `meshplan plan --out`
# writes with the current binary and data.
#
# usage: tests/regen_plans.sh [--check]      (binary: $MESHPLAN_BIN, else build/meshplan)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bin="${MESHPLAN_BIN:-$root/build/meshplan}"
check=0
[[ "${1:-}" == "--check" ]] && check=1
[[ -x "$bin" ]] || { echo "regen_plans: no meshplan binary at $bin (set MESHPLAN_BIN)" >&2; exit 2; }

# name | model | gpus | global batch tokens (explicit binary suffixes: 4Mi = 2^22; 4M would be 4e6)
bundles=(
  "llama3.1-8b-8xh100|llama3.1-8b|8|1Mi"
  "llama3.1-70b-64xh100|llama3.1-70b|64|4Mi"
  "llama3.1-70b-256xh100|llama3.1-70b|256|4Mi"
  "llama3.1-405b-1024xh100|llama3.1-405b|1024|16Mi"
  "llama3.1-405b-16384xh100|llama3.1-405b|16384|16Mi"
)
stale=0
for b in "${bundles[@]}"; do
  IFS='|' read -r name model gpus tokens <<< "$b"
  out="plans/$name"
  if [[ $check -eq 1 ]]; then out="$(mktemp -d)/$name"; fi
  rm -rf "$out"
  "$bin" plan --model "$model" --cluster h100-sxm-80gb --gpus "$gpus" --global-batch-tokens "$tokens" \
    --runtime torchtitan --top 5 --out "$out" > /dev/null 2>&1
  if [[ $check -eq 1 ]]; then
    if ! diff -r "plans/$name" "$out" > /dev/null 2>&1; then
      echo "regen_plans: plans/$name is stale; run tests/regen_plans.sh to regenerate it" >&2
      diff -r "plans/$name" "$out" | head -20 >&2 || true
      stale=1
    fi
    rm -rf "$(dirname "$out")"
  else
    echo "regenerated plans/$name"
  fi
done
exit $stale
