#!/usr/bin/env bash
# Regenerates the tool-generated sections of docs/whatif.md and docs/layouts.md, or with --check
# fails (exit 1) when a committed section differs from what the current binary prints.
#
# A generated section is delimited in the Markdown by
#   <!-- meshplan-gen: ARGS -->   ...output of `meshplan ARGS`...   <!-- /meshplan-gen -->
# ARGS run from the project root; output is fenced as text unless ARGS has --md.
#
# usage: tests/regen_docs.sh [--check] [DOC.md ...]     (binary: $MESHPLAN_BIN, else build/meshplan)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bin="${MESHPLAN_BIN:-$root/build/meshplan}"
check=0
if [[ "${1:-}" == "--check" ]]; then check=1; shift; fi
docs=("$@")
[[ ${#docs[@]} -eq 0 ]] && docs=(docs/whatif.md docs/layouts.md)
[[ -x "$bin" ]] || { echo "regen_docs: no meshplan binary at $bin (set MESHPLAN_BIN)" >&2; exit 2; }

stale=0
for doc in "${docs[@]}"; do
  tmp="$(mktemp)"
  in_block=0
  while IFS= read -r line || [[ -n "$line" ]]; do
    if [[ $in_block -eq 1 ]]; then
      if [[ "$line" == "<!-- /meshplan-gen -->" ]]; then
        in_block=0
        printf '%s\n' "$line" >> "$tmp"
      fi
      continue
    fi
    printf '%s\n' "$line" >> "$tmp"
    if [[ "$line" =~ ^'<!-- meshplan-gen: '(.*)' -->'$ ]]; then
      args="${BASH_REMATCH[1]}"
      in_block=1
      # Word splitting of ARGS is intended: the marker holds a plain command line.
      # shellcheck disable=SC2086
      if ! out="$("$bin" $args 2>/dev/null)"; then
        # Commands that report a problem on purpose (lint errors) still print their output.
        out="$("$bin" $args 2>/dev/null || true)"
      fi
      if [[ " $args " == *" --md "* ]]; then
        printf '%s\n' "$out" >> "$tmp"
      else
        { printf '```text\n'; printf '%s\n' "$out"; printf '```\n'; } >> "$tmp"
      fi
    fi
  done < "$doc"
  if [[ $in_block -eq 1 ]]; then echo "regen_docs: $doc: unterminated meshplan-gen block" >&2; rm -f "$tmp"; exit 2; fi
  if [[ $check -eq 1 ]]; then
    if ! diff -u "$doc" "$tmp" > /dev/null; then
      echo "regen_docs: $doc is stale; run tests/regen_docs.sh to regenerate it. Difference:" >&2
      diff -u "$doc" "$tmp" | head -40 >&2 || true
      stale=1
    fi
    rm -f "$tmp"
  else
    mv "$tmp" "$doc"
    echo "regenerated $doc"
  fi
done
exit $stale
