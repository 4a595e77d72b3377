"""A run of ordinary stores shares one pair of barriers (emit_cpp._store_runs, XL_WARP_STORES).

In a per-request stage every thread of the team computes each value, and one thread stores it
between two barriers: the first so that no thread still reads the old value, the second so that
every thread reads the new one. Consecutive stores that cannot fail and of which none reads what
an earlier one writes can compute all their values first and share the barriers. A store that
reads an earlier one's field starts a new run, or it would read the old value: the CPU build
(which runs the same kernel code) must still equal the simulator.
"""

from __future__ import annotations

import re

from xlgen.backends.build import load_text
from xlgen.runtime import cpu, sim
from xlgen.tools.check.diff import compare

STORES = """pipeline store_runs
request {
    n: i32
    a: i32
    b: i32
    c: i32[4]
    d: i32
    e: f32
}
stage s {
    a = n + 1
    b = n * 2
    c[n % 4] = a + 7
    d = b - a
    e = (d as f32) * 0.5
    n += 1
}
trace s: n, a, b, c, d, e
done when n >= 6
"""


def _kernel(source: str) -> str:
    compiled = load_text(source, "store_runs.xl")
    return (compiled.dir / f"{compiled.name}_kernel.cuh").read_text()


def test_stores_join_until_one_reads_what_the_run_wrote():
    kernel = _kernel(STORES)
    runs = [re.findall(r"XL_RUN_PUT\((r\.\w+)", line) for line in kernel.splitlines() if "XL_WARP_STORES(" in line
            and "#define" not in line]
    # a and b join; c may fail (n % 4 may be negative: its index is checked), so it stores alone;
    # d starts a run after it; e reads d (so another run), which n joins
    assert runs == [["r.a", "r.b"], ["r.e", "r.n"]]
    singles = re.findall(r"XL_WARP_STORE\((r\.\w+)", kernel)
    assert singles == ["r.c", "r.d"]


def test_the_cpu_build_with_runs_equals_the_simulator():
    compiled = load_text(STORES, "store_runs.xl")
    inputs = [{"n": k} for k in range(5)]
    config = sim.LaunchConfig(max_active=5, max_rounds=20)
    want = sim.run(compiled.sim_module(), {}, inputs, config)
    assert len(want.records) > 0
    got = cpu.run(compiled, {}, inputs, config)
    assert compare(compiled.program, want, got) is None
