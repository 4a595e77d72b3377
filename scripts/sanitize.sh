#!/usr/bin/env bash
# compute-sanitizer (memcheck, racecheck, synccheck) over the bundled pipeline's kernel,
# both modes, on the small workload. Run on a GPU machine from the repository root.
set -u
status=0
for tool in memcheck racecheck synccheck; do
  echo "== compute-sanitizer --tool $tool"
  compute-sanitizer --tool "$tool" --error-exitcode 99 python3 scripts/gpu_smoke.py || status=1
done
exit $status
