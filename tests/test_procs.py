"""Procs (docs/language.md, `proc`): a use means the body written in its place.

The checks: a pipeline using procs computes, in the simulator and the CPU build, exactly
what the same pipeline with the bodies pasted in by hand computes (records and final
state, bit for bit); the checker's hygiene (renamed locals, constant arguments, nested
procs); the real pair's forward pass written once (stages/byte_pass.xl); and the fuzzer
generating procs whose uses rename, nest and pass arrays, tensors and pools.
"""

from __future__ import annotations

import numpy as np
import pytest

from xlgen.backends.build import load_text
from xlgen.runtime import cpu, sim
from xlgen.tools.check.diff import compare

# What both versions of the pipeline declare, and their arbiter granting pool pages.
DECLARATIONS = """
pipeline p
const N: i32 = 8
tensor w: f32[N, N]
pool kv: f32[4, N] owned by owner
request {
    a: i32[N]
    b: i32[N]
    x: f32[N]
    y: f32[N]
    steps: i32 = 0
}
shared {
    owner: i32[4] = -1
}
"""
ARBITER = """arbiter grant when owner[req_id % 4] < 0 {
    owner[req_id % 4] = req_id
}
done when steps == 3
"""

# Two procs, one using the other; the stage's locals `i` and `t` are also the body's, and
# the constant argument N is a loop bound in the body.
WITH_PROCS = DECLARATIONS + """proc fill(dst: i32[], base: i32, n: i32) {
    lanes for i in 0..n {
        dst[i] = base * i + req_id
    }
}
proc mix(dst: f32[], src: f32[], ints: i32[], m: tensor, cache: pool, n: i32, page: i32) {
    for t in 0..n {
        lanes for i in 0..n {
            let d = sum(j in 0..n: m[i, j] * src[j])
            dst[i] = d + ints[i] as f32
        }
        if t == 2 {
            break
        }
    }
    lanes for i in 0..n {
        cache[page, i] = dst[i]
    }
    fill(ints, page, 3)
}
stage s {
    let t = steps + 1
    let page = req_id % 4
    for i in 0..2 {
        fill(a, t, N)
        fill(b, i, 4)
    }
    if owner[page] == req_id {
        mix(y, x, a, w, kv, N, page)
    }
    steps = t
}
""" + ARBITER

# The same pipeline with every use replaced by its body by hand: the arguments in place of
# the parameters, and the body's locals renamed where the stage has the name.
INLINE = DECLARATIONS + """stage s {
    let t = steps + 1
    let page = req_id % 4
    for i in 0..2 {
        lanes for i_2 in 0..N {
            a[i_2] = t * i_2 + req_id
        }
        lanes for i_3 in 0..4 {
            b[i_3] = i * i_3 + req_id
        }
    }
    if owner[page] == req_id {
        for t_2 in 0..N {
            lanes for i_4 in 0..N {
                let d = sum(j in 0..N: w[i_4, j] * x[j])
                y[i_4] = d + a[i_4] as f32
            }
            if t_2 == 2 {
                break
            }
        }
        lanes for i_4 in 0..N {
            kv[page, i_4] = y[i_4]
        }
        lanes for i_5 in 0..3 {
            a[i_5] = page * i_5 + req_id
        }
    }
    steps = t
}
""" + ARBITER


def _launch():
    rng = np.random.default_rng(7)
    params = {"w": rng.standard_normal((8, 8)).astype(np.float32)}
    inputs = [{"x": [float(v) for v in rng.standard_normal(8).astype(np.float32)]} for _ in range(6)]
    return params, inputs, sim.LaunchConfig(max_active=4, max_rounds=20)


def test_a_use_is_its_body_in_place():
    with_procs, inline = load_text(WITH_PROCS, name="p.xl"), load_text(INLINE, name="p.xl")
    params, inputs, config = _launch()
    ran = {}
    for name, compiled in (("procs", with_procs), ("inline", inline)):
        ran[name, "sim"] = sim.run(compiled.sim_module(), params, inputs, config)
        ran[name, "cpu"] = cpu.run(compiled, params, inputs, config)
    reference = ran["inline", "sim"]
    assert len(reference.records) > 0 and reference.pools["kv"].any()  # the launch does something
    for key, result in ran.items():
        assert compare(inline.program, reference, result) is None, key


def test_the_body_locals_are_renamed_apart_from_the_stage():
    compiled = load_text(WITH_PROCS, name="p.xl")
    source = compiled.files[f"{compiled.name}_sim.py"]
    # the stage's `i` and `t` keep their names; the bodies' copies take fresh ones
    for fresh in ("i_2", "i_3", "t_2", "i_4", "i_5"):
        assert f"for {fresh} in" in source or f"{fresh} = xl_L.index" in source, fresh


def test_a_local_named_xl_is_renamed_apart_to_a_name_that_is_not_reserved():
    """`xl_2` would start with the reserved `xl_` (fuzz seeds 5300311 and 5300787): `xl2`."""
    source = """pipeline q
request {
    y: i32
    done_: bool
}
proc bump(n: i32) {
    let xl = n + 1
    y += xl
}
stage s when !done_ {
    let xl = 3
    bump(xl)
    bump(5)
    y += xl
    done_ = true
}
trace s: y
done when done_
"""
    compiled = load_text(source, name="q.xl")
    assert "xl2 = " in compiled.files[f"{compiled.name}_sim.py"]
    config = sim.LaunchConfig(max_active=1, max_rounds=3)
    want = sim.run(compiled.sim_module(), {}, [{}], config)
    assert compare(compiled.program, want, cpu.run(compiled, {}, [{}], config)) is None
    assert int(want.requests["y"][0]) == 4 + 6 + 3


def test_a_constant_argument_is_a_constant_in_the_body():
    bad = WITH_PROCS.replace("mix(y, x, a, w, kv, N, page)", "mix(y, x, a, w, kv, page, page)")
    with pytest.raises(Exception) as info:
        load_text(bad, name="p.xl")
    text = info.value.render()
    assert "a loop's bound" in text and "(in proc 'mix' used at p.xl:" in text


def test_the_real_pair_runs_one_forward_pass_for_both_models():
    """stages/byte_pass.xl holds the pass: both models' stages run its lanes loops (the checked
    IR, with each model's weights), and neither keeps a copy of its own."""
    from pathlib import Path

    from xlgen.backends.build import load
    from xlgen.core import ir

    root = Path(__file__).resolve().parent.parent
    program = load(root / "stages" / "byte_spec.xl").program
    for name, prefix in (("spec_verify", "target_"), ("draft_forward", "draft_")):
        loops = [s for s in ir.statements(program.stage(name).body) if isinstance(s, ir.Lanes)]
        from_pass = [s for s in loops if s.loc.file.endswith("byte_pass.xl")]
        assert len(from_pass) >= 11 and len(loops) - len(from_pass) <= 1, (name, len(loops), len(from_pass))
        assert f"{prefix}wq" in repr(from_pass)  # the pass reads this model's weights


def test_the_fuzzer_generates_procs_that_check():
    from xlgen.frontend.checker import procs
    from xlgen.tools.check.fuzzgen import generate

    seen = {"programs": 0, "uses": 0, "renamed": 0, "nested": 0, "arrays": 0, "tensors or pools": 0}
    original = procs.ProcRules._proc_names

    def counting(self, sig, renames, ctx):
        ok = original(self, sig, renames, ctx)
        kinds = {p.kind for p in sig.params}
        seen["uses"] += 1
        seen["nested"] += bool(self.inline_stack)
        seen["renamed"] += any(local not in {p.name for p in sig.params} for local in renames)
        seen["arrays"] += "array" in kinds
        seen["tensors or pools"] += bool(kinds & {"tensor", "pool"})
        return ok

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(procs.ProcRules, "_proc_names", counting)
        for seed in range(120):
            case = generate(seed)
            if "\nproc " in case.source:
                seen["programs"] += 1
                load_text(case.source, name="fuzz.xl")  # a CompileError here is a generator bug
    assert seen["programs"] >= 15 and all(seen.values()), seen


def test_a_runtime_error_in_an_imported_proc_names_its_file(tmp_path):
    """An error record keeps the line only; the message and the JSON name the proc's file."""
    from xlgen.backends.build import load
    from xlgen.tools.check.diff import describe_record, line_file

    (tmp_path / "state.xl").write_text("request {\n    slots: i32[4]\n    k: i32 = 0\n    at: i32 = 0\n}\n")
    (tmp_path / "lib.xl").write_text('import "state.xl"\n\nproc poke(dst: i32[], i: i32) {\n    dst[i] = 1\n}\n')
    (tmp_path / "main.xl").write_text('pipeline lt\nimport "state.xl"\nimport "lib.xl"\n\nstage s {\n'
                                      "    let i = at\n    poke(slots, i)\n    k = 1\n}\ndone when k == 1\n")
    compiled = load(tmp_path / "main.xl")
    for result in (sim.run(compiled.sim_module(), {}, [{"at": 1}, {"at": 7}]),
                   cpu.run(compiled, {}, [{"at": 1}, {"at": 7}])):
        errors = [rec for rec in result.records if "runtime error" in describe_record(compiled.program, rec)]
        assert len(errors) == 1
        text = describe_record(compiled.program, errors[0])
        assert text.endswith("runtime error in stage s (line 4 of " + str(tmp_path / "lib.xl") + "): "
                             "index 7 out of range for 'slots' (length 4)"), text
    assert line_file(compiled.program, 0, 7) == str(tmp_path / "main.xl")  # the use's own line
