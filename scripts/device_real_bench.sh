#!/usr/bin/env bash
# Issue 23, deliverable 5: every baseline of the real pair side by side, in ONE device call, on one GPU.
#   mega-kernel (plain greedy, ASBS, fixed B = 1 2 4 8), PyTorch (eager, CUDA graph per step, one graph for
#   all steps, torch.compile mode="reduce-overhead"), and the hand-written limit of calib/real_limit
#   ((b) one SM per request under the language's exactness rules, (c) a 16-SM cluster), batch 1 and 8,
#   the 8 bundled prompts x 128 new tokens; ~3 minutes on a warm H100.
#
# Before the device call, on the host (once; .calib/ is git-ignored, so name it in `carry`):
#   mkdir -p .calib && cp -r ../shared/calib/real_limit .calib/ && echo /.calib/ >> .git/info/exclude
# The device call (carry [".whl", ".calib"]), from the checkout:
#   bash scripts/device_real_bench.sh
# Writes under $OUT: real_bench.json / real_bench.md (all rows + the summary of ratios), real_bench.log,
# env.txt, limit/ (run_gpu.sh's cuda.log, env.txt, run_gpu.log). Without .calib/real_limit it runs the rest.
# Knobs (environment): REPEATS (3), TEAM_WARPS (a list; default: the runtime's choice per batch), BATCHES (1,8),
# LIMIT_PARTS (bc), EXTRA (more options).
set -u
cd "$(dirname "$0")/.." || exit 2
OUT=${OUT:-/tmp/real_bench_out}
mkdir -p "$OUT"
[ -d .whl ] && source scripts/device_setup.sh
export PYTHONUNBUFFERED=1
{ date -u; git rev-parse HEAD 2>/dev/null; nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv
  nvcc --version | tail -1; python3 -c "import torch, cupy; print('torch', torch.__version__, 'cupy', cupy.__version__)"; } > "$OUT/env.txt" 2>&1
LIMIT=()
if [ -x .calib/real_limit/run_gpu.sh ] || [ -f .calib/real_limit/run_gpu.sh ]; then
  LIMIT=(--limit-dir .calib/real_limit --limit-parts "${LIMIT_PARTS:-bc}")
else
  echo "no .calib/real_limit: the hand-written limit is skipped (see this script's header)" | tee -a "$OUT/env.txt"
fi
TEAMS=()
[ -n "${TEAM_WARPS:-}" ] && TEAMS=(--team-warps "$TEAM_WARPS")
timeout 560 python3 scripts/real_bench.py -o "$OUT" --repeats "${REPEATS:-3}" ${TEAMS[@]+"${TEAMS[@]}"} \
  --batches "${BATCHES:-1,8}" ${LIMIT[@]+"${LIMIT[@]}"} ${EXTRA:-} > "$OUT/real_bench.log" 2>&1
rc=$?
echo "real_bench rc $rc" >> "$OUT/real_bench.log"
tail -n 40 "$OUT/real_bench.log"
[ -f "$OUT/real_bench.md" ] && tail -n 4 "$OUT/real_bench.md"
exit $rc
