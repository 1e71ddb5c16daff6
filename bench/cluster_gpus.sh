#!/usr/bin/env bash
# A Dask cluster on this host's GPUs (a scheduler and one worker per GPU, each with its own
# CUDA_VISIBLE_DEVICES), then `kerntune tune --cluster` on it: what a team's cluster does across
# hosts, on one. Prints the run's end and how many results each worker measured.
#
#   bash bench/cluster_gpus.sh [GPUS=2] [BUDGET=200] [OUT=/tmp/kerntune-cluster]
set -u
GPUS=${1:-2}
BUDGET=${2:-200}
OUT=${3:-${OUT:-/tmp/kerntune-cluster}}
mkdir -p "$OUT"
python3 -m dask scheduler --port 8786 --no-dashboard > "$OUT/scheduler.log" 2>&1 &
pids=($!)
sleep 3
for ((g = 0; g < GPUS; g++)); do
  CUDA_VISIBLE_DEVICES=$g python3 -m dask worker tcp://127.0.0.1:8786 --nthreads 1 --no-dashboard --name "gpu$g" \
    > "$OUT/worker$g.log" 2>&1 &
  pids+=($!)
done
sleep 5
start=$(date +%s.%N)
python3 -m kerntune.tui.cli tune silu_and_mul --problem llama7b-t128 --backend cuda --cluster tcp://127.0.0.1:8786 \
  --budget "$BUDGET" --headless --no-probe --session "$OUT/cluster.toml" 2>&1 | grep -v '^\[' | tail -25
end=$(date +%s.%N)
python3 - "$OUT/cluster.toml" "$start" "$end" <<'PY'
import collections, sys
from kerntune.engine.session import load_session
s = load_session(sys.argv[1])
results = s.results()
print(f"{len(results)} results in {float(sys.argv[3]) - float(sys.argv[2]):.1f} s, by worker:",
      dict(collections.Counter(r.device for r in results)))
PY
kill "${pids[@]}" 2>/dev/null
wait 2>/dev/null
