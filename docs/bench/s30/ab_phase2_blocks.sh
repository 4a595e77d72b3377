# Session 30's device call, not run (no device could be started): the GPU tests of phase 2 over a
# few blocks and of fast mode's serving blocks, then the A/B that should set their defaults.
# Precompile xl_spec's cubin (team 1) for each XLGEN_NVRTC_OPTIONS below first, e.g.
#   XLGEN_NVRTC_OPTIONS="-DXL_PHASE2_BLOCK_SLOTS=32 -DXL_FAST_SERVERS=0" XLGEN_CACHE=$PWD/.xlcache \
#     python3 scripts/precompile_cubins.py stages/xl_spec.xl --teams 1
# and for the tests' own: "-DXL_GRID_PHASE2_MIN=0 -DXL_PHASE2_BLOCK_SLOTS=4", "-DXL_GRID_PHASE2_MIN=0
# -DXL_FAST_SERVERS=4", "-DXL_PHASE2_BLOCK_SLOTS=32", "-DXL_FAST_SERVERS=0" (~30 s each here, 2-3 at once).
# The simulator's digests of 1,000 and 100,000 requests (KV on and off) are beside this script, for the stages of
# b7bec7e (if stages/*.xl changed since, recompute them: XLGEN_CACHE=$PWD/.xlcache python3
# scripts/grid_phase2_check.py 1000 100000 --sim-only, ~4 min). Then run it with the device tool:
# bash docs/bench/s30/ab_phase2_blocks.sh (carry .whl, .xlcache).
set -u
export XLGEN_CACHE=$PWD/.xlcache
. scripts/device_setup.sh
[ -f $XLGEN_CACHE/sim_digests.json ] || cp docs/bench/s30/sim_digests.json $XLGEN_CACHE/
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $OUT/nvidia-smi.txt
T0=$(date +%s)
timeout 150 python3 -m pytest -q -p no:cacheprovider -n 14 -m gpu tests/test_collectives.py tests/test_kv_cache.py \
  -k "epoch or grid or crowd or oversubscribed or arbiter" > $OUT/tests.txt 2>&1
echo "tests rc $? in $(( $(date +%s) - T0 )) s"; tail -4 $OUT/tests.txt
ab() {  # name options points
  local t=$(date +%s)
  XLGEN_NVRTC_OPTIONS="$2" OUT=$OUT/$1 timeout 150 python3 scripts/fast_kv_check.py --repeats 3 --timeout 40 --points $3 > $OUT/$1.txt 2>&1
  echo "== $1 [$2] rc $? $(( $(date +%s) - t )) s"
  grep '^{' $OUT/$1.txt | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line); print(f"  {r[\"point\"]:15s} {r[\"mode\"]:13s} median {r[\"median_ms\"]} runs {[round(x, 2) for x in r[\"runs_ms\"]]} ok {r[\"ok\"]} {r[\"problems\"][:1]}")'
}
ab default "" 1000,oversubscribed,target,1000-off,target-off
ab slots32 "-DXL_PHASE2_BLOCK_SLOTS=32 -DXL_FAST_SERVERS=0" 1000,oversubscribed,target
OUT=$OUT timeout 200 python3 scripts/grid_phase2_check.py 1000 100000 --repeats 2 --variants "grid,grid/32-a-block" \
  > $OUT/grid_phase2.txt 2>&1; echo "== grid_phase2_check rc $?"; grep '^{' $OUT/grid_phase2.txt
for v in 8 128 16 64; do
  [ $(( $(date +%s) - T0 )) -gt 480 ] && { echo "skip slots$v (time)"; continue; }
  ab slots$v "-DXL_PHASE2_BLOCK_SLOTS=$v -DXL_FAST_SERVERS=0" 1000,oversubscribed
done
echo "total $(( $(date +%s) - T0 )) s"
