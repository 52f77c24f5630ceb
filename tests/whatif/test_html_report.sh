#!/usr/bin/env bash
# The what-if HTML report opens in headless Chromium without errors and its charts render: the
# page's own check (a few lines of inline JS) counts the SVG bars and points and writes the counts
# into #status, which --dump-dom shows after scripts ran. Skips (exit 77) without /usr/bin/chromium.
# Set MESHPLAN_SCREENSHOT=out.png to also save a screenshot.
set -euo pipefail
chromium=/usr/bin/chromium
if [[ ! -x "$chromium" ]]; then echo "skip: $chromium not installed (apt-get install chromium)"; exit 77; fi
root="${MESHPLAN_DATA_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
bin="${MESHPLAN_BIN:-$root/build/meshplan}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
html="$work/report.html"

"$bin" whatif --config "$root/plans/examples/mpt-7b-8gpu-pure-ac.yaml" --gpus 8 --cluster a100-80gb \
  --vary fsdp_config.mixed_precision=DEFAULT,PURE --vary fsdp_config.activation_checkpointing=true,false \
  --html "$html" > /dev/null

# Self-contained: nothing to fetch.
if grep -Eq '(src|href)="(https?:)?//' "$html"; then echo "FAIL: the report references the network"; exit 1; fi
# Four variants: four bars in each stacked chart, four points in the scatter.
[[ $(grep -o '<g class="bar"' "$html" | wc -l) -eq 8 ]] || { echo "FAIL: expected 8 bars in the page source"; exit 1; }
[[ $(grep -o '<g class="point' "$html" | wc -l) -eq 4 ]] || { echo "FAIL: expected 4 scatter points"; exit 1; }

flags=(--headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking
       --disable-component-update --disable-sync --user-data-dir="$work/profile")
dom="$work/dom.html"
timeout 120 "$chromium" "${flags[@]}" --dump-dom "file://$html" > "$dom" 2> "$work/chromium.log" || {
  echo "FAIL: chromium exited with an error"; tail -20 "$work/chromium.log"; exit 1; }
# The page's error handler marks #status with class "err" and the message.
if grep -q 'class="err">script error' "$dom"; then echo "FAIL: $(grep -o 'class="err">script error[^<]*' "$dom")"; exit 1; fi
status="$(grep -o 'id="status"[^>]*>charts ok: [^<]*' "$dom" | sed 's/^[^>]*>//' || true)"
echo "page says: ${status:-nothing}"
[[ "$status" =~ ^'charts ok: 4 time bars, 4 memory bars, 4 points, '[1-4]' on the Pareto front'$ ]] || {
  echo "FAIL: the page's chart check did not pass"; exit 1; }
if [[ -n "${MESHPLAN_SCREENSHOT:-}" ]]; then
  timeout 120 "$chromium" "${flags[@]}" --window-size=1280,2200 --screenshot="$MESHPLAN_SCREENSHOT" "file://$html" \
    2> /dev/null > /dev/null
  echo "screenshot: $MESHPLAN_SCREENSHOT"
fi
echo "ok"
