#!/usr/bin/env bash
# meshplan launch script: llama3.1-405b on 16384 GPUs (2048 nodes x 8 of h100-sxm-80gb), torchtitan @ 238fa9953e4a.
# Without Slurm: run on each of the 2048 nodes with NODE_RANK (0..2047) and MASTER_ADDR (node 0) set;
# with Slurm use sbatch.slurm.
set -euo pipefail
BUNDLE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# Runs inside a torchtitan checkout at 238fa9953e4a: set TORCHTITAN_DIR to it (default: the current folder).
TORCHTITAN_DIR="${TORCHTITAN_DIR:-$PWD}"
if [ ! -f "$TORCHTITAN_DIR/torchtitan/train.py" ]; then
  echo "meshplan bundle: $TORCHTITAN_DIR is not a torchtitan checkout at 238fa9953e4a (no torchtitan/train.py); set TORCHTITAN_DIR" >&2
  exit 2
fi
cd "$TORCHTITAN_DIR"
export PYTORCH_ALLOC_CONF="expandable_segments:True"
# The plan checkpoints every 43 steps (plan.md) into CHECKPOINT_DIR: a folder every node can write.
CHECKPOINT_DIR="${CHECKPOINT_DIR:?set CHECKPOINT_DIR to a folder on shared storage (checkpoints every 43 steps)}"
mkdir -p "$CHECKPOINT_DIR"
export CHECKPOINT_DIR
NODE_RANK="${NODE_RANK:?set NODE_RANK (0..2047)}"
MASTER_ADDR="${MASTER_ADDR:?set MASTER_ADDR to node 0}"
MASTER_PORT="${MASTER_PORT:-29500}"
torchrun --nnodes=2048 --nproc_per_node=8 --node_rank="$NODE_RANK" \
    --rdzv_backend c10d --rdzv_endpoint="$MASTER_ADDR:$MASTER_PORT" \
    --local-ranks-filter 0 --role rank --tee 3 \
    -m torchtitan.train \
    --job.config_file "$BUNDLE_DIR/llama3.1-405b.toml" \
    --checkpoint.folder "$CHECKPOINT_DIR" "$@"
