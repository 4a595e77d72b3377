#!/usr/bin/env bash
# One pass on the GPU machine, parts in one call (docs/benchmarks.md says what each measured):
#
#   OUT=DIR bash scripts/gpu_pass.sh tests bench ncu fuzz
#
#   tests   the GPU suite (pytest -m gpu -n 12)
#   bench   scripts/real_bench.py (plain, ASBS, fixed B; batch 1 and 8; team of 16 warps) on this
#           tree and, when .base/ holds another tree (e.g. `git archive MAIN | tar -x -C .base`,
#           carried), on that one too: an A/B on the same card in the same call
#   (the hand-written limit and every PyTorch baseline beside the mega-kernel: scripts/device_real_bench.sh)
#   ncu     warp instructions executed (ncu) of the GEMV example and of one real-pair launch,
#           this tree and .base/, divided by multiply-adds (scripts/inst_per_mac.py)
#   fuzz    the differential fuzzer on the GPU (scripts/fuzz_many.py; FUZZ_FIRST, FUZZ_COUNT programs per
#           shape of FUZZ_SHAPES): teams of 1, 4, 8 and 16 warps in deterministic mode (WxB: W warps in
#           each of a cluster's B blocks, e.g. 4x2), fast mode on
#           schedule-free programs against sim.run_interleaved ("fast") and on any program ("fast-any")
#   cpufuzz the simulator against the CPU build on the machine's cores (CPUFUZZ_FIRST, CPUFUZZ_COUNT)
#
# Needs the carried wheels (.whl/: lark) that scripts/device_setup.sh installs.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_setup.sh
ROOT=$PWD
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,driver_version --format=csv | tee "$OUT/gpu.txt"

in_tree() {  # in_tree DIR CMD...: run CMD with DIR's xlgen and a compile cache of its own
    local dir=$1; shift
    (cd "$dir" && PYTHONPATH=/tmp/site:$PWD XLGEN_CACHE=/tmp/xlgen-cache-$(basename "$PWD") "$@")
}

for part in "$@"; do
    echo "== $part $(date +%T)"
    case $part in
    tests)
        timeout ${TESTS_TIMEOUT:-420} python3 -m pytest -m gpu -n 12 -q -rfE --timeout=${TEST_TIMEOUT:-240} ${TESTS:-} 2>&1 | grep -v -i benchmark > "$OUT/tests.txt"
        tail -25 "$OUT/tests.txt" ;;
    bench)
        in_tree "$ROOT" timeout ${BENCH_TIMEOUT:-300} python3 scripts/real_bench.py -o "$OUT/bench_new" --team-warps 16 \
            --batches 1,8 --repeats 3 --torch-modes graph_kv 2>&1 | tee "$OUT/bench_new.log" | tail -30
        if [ -d .base/xlgen ]; then
            in_tree "$ROOT/.base" timeout ${BENCH_TIMEOUT:-300} python3 scripts/real_bench.py -o "$OUT/bench_base" \
                --team-warps 16 --batches 1,8 --repeats 3 --no-torch 2>&1 | tee "$OUT/bench_base.log" | tail -30
        fi ;;
    ncu)
        for tree in "$ROOT" "$ROOT/.base"; do
            [ -d "$tree/xlgen" ] || continue
            in_tree "$tree" timeout 300 python3 "$ROOT/scripts/inst_per_mac.py" "$OUT/ncu_$(basename "$tree").json" 2>&1 | tail -12
        done ;;
    fuzz)
        for shape in ${FUZZ_SHAPES:-1 4 8 16 fast fast-any}; do
            case $shape in  # a team of N warps (deterministic mode), or fast mode
            fast) env=(XLGEN_TEAM_WARPS=1 BACKENDS=gpu-fast SCHEDULE_FREE=1); first=$(( ${FUZZ_FIRST:-950000} + 200000 )) ;;
            fast-any) env=(XLGEN_TEAM_WARPS=1 BACKENDS=gpu-fast); first=$(( ${FUZZ_FIRST:-950000} + 300000 )) ;;
            *x*) w=${shape%x*}; b=${shape#*x}  # W warps x B blocks: a cluster per request
                env=(XLGEN_TEAM_WARPS=$w XLGEN_TEAM_BLOCKS=$b BACKENDS=gpu); first=$(( ${FUZZ_FIRST:-950000} + 400000 + w * b * 10000 )) ;;
            *) env=(XLGEN_TEAM_WARPS=$shape BACKENDS=gpu); first=$(( ${FUZZ_FIRST:-950000} + shape * 10000 )) ;;
            esac
            env "${env[@]}" JOBS=${FUZZ_JOBS:-14} timeout ${FUZZ_TIMEOUT:-130} \
                python3 scripts/fuzz_many.py "$first" "${FUZZ_COUNT:-750}" "$OUT/fuzz_$shape.json" 2>&1 | tail -3
            python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('$shape', 'seeds', d['first'], '+', d['done'], 'failing', len(d['failures']), [f['seed'] for f in d['failures']][:20])" "$OUT/fuzz_$shape.json"
        done ;;
    cpufuzz)
        JOBS=${FUZZ_JOBS:-15} timeout ${CPUFUZZ_TIMEOUT:-400} python3 scripts/fuzz_many.py ${CPUFUZZ_FIRST:-1400000} \
            ${CPUFUZZ_COUNT:-10000} "$OUT/fuzz_cpu.json" 2>&1 | tail -3 ;;
    *) echo "unknown part $part" ;;
    esac
done
