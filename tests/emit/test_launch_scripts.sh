#!/usr/bin/env bash
# The emitted launch scripts, run as plan.md says (from the bundle folder, the runtime's checkout
# named by its environment variable), with the runtime replaced by stubs that check their
# arguments and that every file they are given exists where they run. Also: started without a
# checkout, a script stops with exit 2 and names the variable.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin="${MESHPLAN_BIN:-$root/build/meshplan}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "test_launch_scripts: $*" >&2; exit 1; }

# ---- stubs: torchrun, composer, srun, scontrol
stubs="$work/stubs"
mkdir -p "$stubs"
cat > "$stubs/torchrun" <<'STUB'
#!/usr/bin/env bash
# Checks what torchrun would start: the module or script exists in the checkout (cwd), the config
# file exists, and the torchtitan TOML's asset path exists relative to the checkout.
set -euo pipefail
log="${STUB_LOG:?}"
args=("$@")
script="" config=""
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    -m) script="${args[i+1]//.//}.py" ;;
    --job.config_file) config="${args[i+1]}" ;;
    pretrain_gpt.py) script=pretrain_gpt.py ;;
    --checkpoint.folder|--save) echo "checkpoints ${args[i+1]}" >> "$log" ;;
  esac
done
[ -n "$script" ] && [ -f "$script" ] || { echo "torchrun stub: no entry point '$script' in $PWD" >&2; exit 9; }
if [ -n "$config" ]; then
  [ -f "$config" ] || { echo "torchrun stub: config $config missing" >&2; exit 9; }
  assets=$(sed -n -E 's/^(hf_assets_path|tokenizer_path) *= *"([^"]*)".*/\2/p' "$config" | head -1)
  [ -z "$assets" ] || [ -e "$assets" ] || { echo "torchrun stub: $assets missing under $PWD" >&2; exit 9; }
fi
echo "torchrun ok $script" >> "$log"
STUB
cat > "$stubs/composer" <<'STUB'
#!/usr/bin/env bash
set -euo pipefail
args=("$@")
script="" yaml=""
for a in "${args[@]}"; do
  case "$a" in
    *.py) script="$a" ;;
    *.yaml) yaml="$a" ;;
  esac
done
[ -f "$script" ] || { echo "composer stub: no $script in $PWD" >&2; exit 9; }
[ -f "$yaml" ] || { echo "composer stub: no config $yaml" >&2; exit 9; }
echo "composer ok $script" >> "${STUB_LOG:?}"
STUB
cat > "$stubs/scontrol" <<'STUB'
#!/usr/bin/env bash
echo node0
echo node1
STUB
cat > "$stubs/srun" <<'STUB'
#!/usr/bin/env bash
# Drops srun's own options and runs the command once (as the task of node 0).
while [ $# -gt 0 ]; do
  case "$1" in
    -w) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
if [ "${1:-}" = hostname ]; then echo 127.0.0.1; exit 0; fi
exec "$@"
STUB
chmod +x "$stubs"/*

for rt in torchtitan llm-foundry megatron; do
  bundle="$work/$rt"
  "$bin" plan --model llama3.1-8b --cluster h100-sxm-80gb --gpus 16 --global-batch-tokens 1Mi --runtime "$rt" \
    --top 1 --out "$bundle" > /dev/null 2> "$work/plan.err" || fail "$rt: plan --out failed: $(cat "$work/plan.err")"
  [ -f "$bundle/launch.sh" ] && [ -f "$bundle/sbatch.slurm" ] || fail "$rt: bundle lacks launch.sh or sbatch.slurm"
  case "$rt" in
    torchtitan) var=TORCHTITAN_DIR; marker=torchtitan/train.py ;;
    llm-foundry) var=LLM_FOUNDRY_DIR; marker=scripts/train/train.py ;;
    megatron) var=MEGATRON_DIR; marker=pretrain_gpt.py ;;
  esac
  grep -q "$var=/path/to/checkout sbatch sbatch.slurm" "$bundle/plan.md" || fail "$rt: plan.md does not say how to launch"

  # Without a checkout: exit 2 and the variable named.
  set +e
  (cd "$bundle" && env -u "$var" PATH="$stubs:$PATH" STUB_LOG="$work/log" NODE_RANK=0 MASTER_ADDR=127.0.0.1 \
    bash launch.sh > /dev/null 2> "$work/err")
  rc=$?
  set -e
  [ $rc -eq 2 ] || fail "$rt: launch.sh without $var exited $rc, expected 2"
  grep -q "$var" "$work/err" || fail "$rt: launch.sh without a checkout does not name $var"

  # A checkout with the entry point and the assets the config names.
  co="$work/checkout-$rt"
  mkdir -p "$co/$(dirname "$marker")"
  : > "$co/$marker"
  if [ "$rt" = torchtitan ]; then
    toml=$(ls "$bundle"/*.toml | head -1)
    assets=$(sed -n -E 's/^(hf_assets_path|tokenizer_path) *= *"([^"]*)".*/\2/p' "$toml" | head -1)
    [ -n "$assets" ] && mkdir -p "$co/$assets"
  fi
  # The plan checkpoints (plan.md gives the interval): without CHECKPOINT_DIR the scripts stop
  # and name it; with it, the runtime is started with checkpoints on and saving there.
  grep -q "checkpoint every [0-9]* steps" "$bundle/plan.md" || fail "$rt: plan.md names no checkpoint interval"
  set +e
  (cd "$bundle" && env -u CHECKPOINT_DIR "$var=$co" PATH="$stubs:$PATH" STUB_LOG="$work/log" NODE_RANK=0 \
    MASTER_ADDR=127.0.0.1 bash launch.sh > /dev/null 2> "$work/err")
  rc=$?
  set -e
  [ $rc -ne 0 ] || fail "$rt: launch.sh without CHECKPOINT_DIR started"
  grep -q CHECKPOINT_DIR "$work/err" || fail "$rt: launch.sh without CHECKPOINT_DIR does not name it"
  case "$rt" in
    torchtitan) grep -q '^enable = true' "$bundle"/*.toml || fail "torchtitan: [checkpoint] enable is not true" ;;
    llm-foundry) grep -q '^save_folder: ${oc.env:CHECKPOINT_DIR' "$bundle"/*.yaml || fail "llm-foundry: no save_folder" ;;
    megatron)
      iters=$(sed -n 's/^--train-iters //p' "$bundle/megatron_args.txt")
      every=$(sed -n 's/^--save-interval //p' "$bundle/megatron_args.txt")
      [ "$iters" -ge "$every" ] || fail "megatron: --train-iters $iters ends before --save-interval $every" ;;
  esac
  ckpt="$work/ckpt-$rt"
  rm -f "$work/log"
  (cd "$bundle" && env "$var=$co" CHECKPOINT_DIR="$ckpt" PATH="$stubs:$PATH" STUB_LOG="$work/log" NODE_RANK=0 \
    MASTER_ADDR=127.0.0.1 bash launch.sh) || fail "$rt: launch.sh from the bundle folder failed"
  grep -q " ok " "$work/log" || fail "$rt: launch.sh did not start the runtime"
  [ -d "$ckpt" ] || fail "$rt: launch.sh did not create CHECKPOINT_DIR"
  if [ "$rt" != llm-foundry ]; then
    grep -qx "checkpoints $ckpt" "$work/log" || fail "$rt: the runtime was not told to save into CHECKPOINT_DIR"
  fi
  rm -f "$work/log"
  (cd "$bundle" && env "$var=$co" CHECKPOINT_DIR="$ckpt" PATH="$stubs:$PATH" STUB_LOG="$work/log" SLURM_SUBMIT_DIR="$bundle" \
    SLURM_JOB_NODELIST=node[0-1] SLURM_JOB_ID=1 SLURM_NODEID=0 bash sbatch.slurm) ||
    fail "$rt: sbatch.slurm from the bundle folder failed"
  grep -q " ok " "$work/log" || fail "$rt: sbatch.slurm did not start the runtime"
done
echo "test_launch_scripts: torchtitan, llm-foundry and megatron bundles launch as plan.md says"
