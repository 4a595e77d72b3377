"""A cluster team's spread loop skips its entry barrier only where nothing since the cluster's last
barrier touched what it writes (xl_team_loop, emit_cpp.state_mask; docs/gpu.md, "Teams of warps").

After a loop that ran in every block alike, the blocks are synchronised by their own barriers
only: a spread loop's iterations, storing into every block's copy of the request, would race with
a slower block still reading what they overwrite. The emitter gives each lanes loop the fields and
pools it may write and touch, and each statement of a stage's own code what it touches
(XL_TOUCH); the cluster barrier clears the record. tests/test_teams_gpu.py runs the program below on
cluster teams against the simulator.
"""

from __future__ import annotations

import re
from pathlib import Path

from xlgen.backends.build import load_text
from xlgen.backends.emit_cpp import ALL_STATE, state_mask
from xlgen.core import ir

# Loop 2 (in every block alike) reads `c`, which loop 3 (spread) writes: its entry barrier stays;
# loop 5 (spread) writes `d`, which nothing since loop 3's exit touched: it goes.
WRITES_AFTER_READS = (Path(__file__).parent / "programs" / "team_touch.xl").read_text()


def _loops(source: str) -> list[tuple[int, int]]:
    """(Writes, Touches) of each lanes loop of the program's kernel, in order."""
    compiled = load_text(source, "touch.xl")
    kernel = (compiled.dir / f"{compiled.name}_kernel.cuh").read_text()
    found = re.findall(r"xl_lanes(?:_v|_grouped)?<[^>]*?(0x[0-9a-f]{8})u, (0x[0-9a-f]{8})u>", kernel)
    return [(int(w, 16), int(t, 16)) for w, t in found]


def test_state_access_names_fields_pools_and_writes():
    x = ir.Var(ir.FIELD, "x", ir.F32)
    y = ir.Var(ir.FIELD, "y", ir.F32)
    local = ir.Var(ir.LOCAL, "k", ir.I32)
    assign = ir.Assign(x, None, ir.Binary("+", y, ir.Cast(local, ir.F32), ir.F32))
    assert ir.state_access(assign) == ({"x", "y"}, {"x"})
    cond = ir.Binary("<", y, ir.Const(1.0, ir.F32), ir.BOOL)
    branch = ir.If(((cond, (assign,)),), ())
    assert ir.state_access(branch, own_only=True) == ({"y"}, set())  # its condition only
    assert ir.state_access(branch) == ({"x", "y"}, {"x"})
    helper = ir.ExprStmt(ir.Call("h", (local,), None))
    assert ir.state_access(helper) == ({ir.ANY_POOL}, {ir.ANY_POOL})  # a helper: any pool


def test_state_mask_buckets():
    assert state_mask(set()) == "0x00000000u"
    assert state_mask({"pool kv", ir.ANY_POOL}) == "0x80000000u"  # every pool: one bit
    assert int(state_mask({"a", "b", "c"})[:-1], 16) & 0x7FFFFFFF  # fields: bits 0-30
    assert ALL_STATE == "0xffffffffu"


def test_a_spread_loop_after_reads_of_what_it_writes_keeps_its_barrier():
    loops = _loops(WRITES_AFTER_READS)
    assert len(loops) == 5
    (_, _), (_, touch2), (writes3, _), (_, touch4), (writes5, _) = loops
    assert touch2 & writes3  # loop 2 read c, loop 3 writes it: the cluster barrier stays
    assert not (touch4 & writes5)  # loop 4 read a and b, loop 5 writes d: none needed
    # (the stage's own code: what it touched is recorded, and the stage starts from anything)
    kernel = (load_text(WRITES_AFTER_READS, "touch.xl").dir / "touch_kernel.cuh").read_text()
    assert f"XL_TOUCH({ALL_STATE});" in kernel and f"XL_TOUCH({state_mask({'n'})});" in kernel


def test_a_stage_without_a_loop_to_spread_records_nothing():
    source = WRITES_AFTER_READS.replace("let t = sum(j in 0..N: b[j] * (i + j + n) as f32)", "let t = b[i]")
    source = source.replace("let m = max(j in 0..N: b[j] - a[i])", "let m = b[i] - a[i]")
    source = source.replace("let m = min(j in 0..N: b[j] + c[i])", "let m = b[i] + c[i]")
    kernel = (load_text(source, "touch.xl").dir / "touch_kernel.cuh").read_text()
    assert "XL_TOUCH" not in kernel and not _loops(source)


# A loop's body that ends with a lanes loop, entered right after one: its first lanes loop follows a
# lanes loop in every iteration (the forward pass's layers), so it needs no barrier on entry.
LAYERS = """pipeline layers
const N: i32 = 8
request {
    a: f32[N]
    b: f32[N]
    n: i32
    done_: bool
}
stage s when !done_ {
    lanes for i in 0..N {
        a[i] = i as f32
    }
    for l in 0..3 {
        lanes for i in 0..N {
            b[i] = a[i] + l as f32
        }
        lanes for i in 0..N {
            a[i] = b[(i + 1) % N] * 0.5
        }
    }
    done_ = true
}
done when done_
"""


def _entry_syncs(source: str) -> list[bool]:
    """Each lanes loop's EntrySync (xl_lanes<ByWarp, EntrySync = true, ...>), in order."""
    kernel = (load_text(source, "layers.xl").dir / "layers_kernel.cuh").read_text()
    return [flags[1] != "false" for flags in re.findall(r"xl_lanes(?:_v)?<(\w+)(?:, (\w+))?", kernel)]


def test_a_loops_first_lanes_loop_after_one_needs_no_entry_barrier():
    assert _entry_syncs(LAYERS) == [True, False, False]
    # ... not where the body ends in the stage's own code, nor where it may continue from its
    # middle, nor where the loop is entered after the stage's own code
    end = "            a[i] = b[(i + 1) % N] * 0.5\n        }\n"
    assert _entry_syncs(LAYERS.replace(end, end + "        n = n + 1\n")) == [True, True, False]
    assert _entry_syncs(LAYERS.replace("    for l in 0..3 {\n", "    for l in 0..3 {\n        if n > 5 {\n"
                                       "            continue\n        }\n")) == [True, True, False]
    assert _entry_syncs(LAYERS.replace("    for l in 0..3 {\n", "    n = 2\n    for l in 0..3 {\n")) == [True, True, False]
