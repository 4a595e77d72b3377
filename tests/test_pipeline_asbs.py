"""Adaptive Speculative Block Sizing in the bundled pipeline, exactly as design.md
section 5 specifies it, checked on the traced history of every request:

    r   = accepted / proposed (0 when nothing was proposed)
    ema = 0.2 * r + 0.8 * ema                (initial ema = 0.8)
    B   = 8 if ema >= 0.80, 4 if 0.50 <= ema < 0.80, 1 otherwise
    B   = min(B, 2) while KV_PRESSURE is set

The trace `spec_verify: accepted_prefix_len, current_block_size, ema_acceptance_rate`
gives, per request, the block size chosen after each verify; with the first block
(traced by prefill) that is the request's block_size_history. The EMA is
recomputed here independently, in binary32, and compared bit for bit.
Every backend is checked: the simulator, the CPU build, and the GPU (both modes)
when one is present.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from xlgen.core import ir
from xlgen.backends.build import load
from xlgen.tools.check.diff import _trace_fields
from xlgen.runtime import cpu, gpu, sim
from xlgen.semantics.ops import bits_f32, f32, f32_bits
from xlgen.runtime.sim import KIND_DONE, KIND_ERROR, LaunchConfig
from xlgen.tools.pipeline.workload import from_dict

GPU_MARKS = [pytest.mark.gpu,
             pytest.mark.skipif(not gpu.available(), reason="needs an NVIDIA GPU with CuPy (pip install 'xlgen[gpu]')")]
BACKENDS = ["sim", "cpu",
            pytest.param("gpu", marks=GPU_MARKS, id="gpu"),
            pytest.param("gpu-fast", marks=GPU_MARKS, id="gpu-fast")]

KV_PRESSURE = 1  # bit 0 of req_flags: the first member of `flags ReqFlag` (checked below)
CONSTANT, STRUCTURED, BURSTY = 0, 1, 2  # enum Profile (checked below)


# ---- the rules of design.md section 5, written independently of the pipeline ----------

ALPHA = f32(0.2)
ONE_MINUS_ALPHA = f32(1.0 - ALPHA)  # the f32 nearest 0.8
EMA_INIT = f32(0.8)


def design_ratio(accepted: int, proposed: int) -> float:
    return 0.0 if proposed <= 0 else f32(f32(accepted) / f32(proposed))


def design_ema(ema: float, r: float) -> float:
    """ema' = 0.2 * r + 0.8 * ema, each operation rounded to binary32, in the pipeline's
    order: (alpha * r) + ((1 - alpha) * ema)."""
    return f32(f32(ALPHA * r) + f32(ONE_MINUS_ALPHA * ema))


def design_block(ema: float, kv_pressure: bool) -> int:
    b = 8 if ema >= 0.80 else 4 if ema >= 0.50 else 1
    return min(b, 2) if kv_pressure else b


# ---- block_size_history from the traces ------------------------------------------------

@dataclass
class Step:
    """One speculation step, as spec_verify and commit traced it."""
    n_out: int  # tokens committed before the step
    proposed: int  # the draft length: the block, cut to what the answer may still take
    accepted: int
    block: int  # the block size ASBS chose after this verify
    ema: float
    ema_bits: int
    committed: int  # tokens the commit appended


@dataclass
class History:
    req: int
    token_limit: int
    first_block: int
    steps: list[Step] = field(default_factory=list)

    @property
    def block_size_history(self) -> list[int]:
        """The block of each step, then the one chosen after the last verify."""
        return [self.first_block] + [s.block for s in self.steps]


def _decode(program: ir.Program, rec) -> dict:
    out = {}
    for (label, t), word in zip(_trace_fields(program, int(rec[2])), rec[4:]):
        word = int(word)
        kind = ir.storage_word(t)
        if kind == "f":
            out[label] = bits_f32(word)
            out[label + ".bits"] = word
        elif kind == "i":
            out[label] = word - (1 << 32) if word >= 1 << 31 else word
        else:
            out[label] = word
    return out


def histories(program: ir.Program, result) -> list[History]:
    """Each request's history; checks the record sequence prefill, (verify, commit)*, done
    (the KV cache's residency records, trace kv_manage, are set aside)."""
    kinds = {t.stage: t.index for t in program.traces}
    out = []
    for i in range(len(result.requests)):
        recs = result.per_request(i)
        recs = recs[recs[:, 2] != kinds["kv_manage"]]
        assert len(recs) and recs[-1][2] == KIND_DONE, f"{result.backend}: request {i} did not finish: {recs[-1:]}"
        assert not (recs[:, 2] == KIND_ERROR).any()
        prefill = _decode(program, recs[0])
        assert recs[0][2] == kinds["prefill"]
        h = History(i, prefill["token_limit"], prefill["current_block_size"])
        n_out = 0
        body = recs[1:-1]
        assert len(body) % 2 == 0
        for verify, commit in zip(body[0::2], body[1::2]):
            assert verify[2] == kinds["spec_verify"] and commit[2] == kinds["commit"]
            v, c = _decode(program, verify), _decode(program, commit)
            block = h.block_size_history[-1]
            h.steps.append(Step(n_out, min(block, h.token_limit - n_out), v["accepted_prefix_len"],
                                v["current_block_size"], v["ema_acceptance_rate"],
                                v["ema_acceptance_rate.bits"], c["last_commit_len"]))
            assert c["n_out"] == n_out + c["last_commit_len"]
            n_out = c["n_out"]
        out.append(h)
    return out


def check_asbs_exact(h: History, kv_pressure: bool, ema_init: float = EMA_INIT, backend: str = "") -> None:
    """The whole history follows the design's rules, the EMA bit for bit."""
    where = f"{backend}: request {h.req}"
    assert h.first_block == design_block(ema_init, kv_pressure), where
    ema = ema_init
    for k, s in enumerate(h.steps):
        assert s.proposed >= 1, where
        assert 0 <= s.accepted <= s.proposed, f"{where} step {k}"
        ema = design_ema(ema, design_ratio(s.accepted, s.proposed))
        assert s.ema_bits == f32_bits(ema), (
            f"{where} step {k}: traced ema {s.ema!r} (0x{s.ema_bits:08x}), expected {ema!r} (0x{f32_bits(ema):08x})")
        assert s.block == design_block(ema, kv_pressure), f"{where} step {k}: B={s.block} at ema {ema!r}"


# ---- the runs ----------------------------------------------------------------------------

def _mixed(module, count: int, seed: int) -> list[dict]:
    return from_dict({"seed": seed, "generate": {"count": count, "fields": {
        "seed": {"counter": 100 * seed},
        "prompt_len": {"uniform": [1, 64]},
        "max_new_tokens": {"choice": [0, 1, 5, 20, 64, 120, 600]},
        "profile": {"cycle": ["CONSTANT", "STRUCTURED", "BURSTY"]},
        "base_acceptance": {"uniform": [0.0, 1.0]},
        "req_flags": {"choice": [0, 0, "KV_PRESSURE"]},
    }}}, module).inputs


def _same(count: int, **fields) -> list[dict]:
    return [{"seed": 11 + s, "prompt_len": 7 + s, **fields} for s in range(count)]


def run_specs(module) -> dict[str, tuple[dict, list[dict]]]:
    mixed = _mixed(module, 60, 3)
    return {
        "sustained": ({}, _same(4, max_new_tokens=200, base_acceptance=1.0)),
        "sustained_from_zero": ({"asbs_ema_init": 0.0}, _same(4, max_new_tokens=200, base_acceptance=1.0)),
        "rejection": ({}, _same(4, max_new_tokens=60, base_acceptance=0.0)),
        "pressure": ({}, [{"seed": 40 + i, "max_new_tokens": 150, "profile": p, "base_acceptance": b,
                           "req_flags": KV_PRESSURE} for i, (p, b) in
                          enumerate((p, b) for p in (CONSTANT, STRUCTURED, BURSTY) for b in (0.0, 0.5, 0.9, 1.0))]
                     + _same(2, max_new_tokens=100, base_acceptance=1.0)),
        # BURSTY at base 1.0: the first 90 tokens are accepted whole (ten steps of 8 + bonus),
        # then the draft agrees with probability 0.25 only.
        "ten_then_one": ({"burst_len": 90}, _same(16, max_new_tokens=110, profile=BURSTY, base_acceptance=1.0)),
        "mixed": ({}, mixed),
        "fixed1": ({"fixed_block": 1}, mixed[:30]),
        "fixed4": ({"fixed_block": 4}, mixed[:30]),
        "fixed8": ({"fixed_block": 8}, mixed[:30]),
        "constant": ({}, _same(4, max_new_tokens=256, base_acceptance=0.98)
                     + _same(4, max_new_tokens=256, base_acceptance=0.3)),
        "structured": ({}, _same(6, max_new_tokens=512, profile=STRUCTURED, base_acceptance=0.98)),
        "bursty": ({"burst_len": 64}, _same(6, max_new_tokens=512, profile=BURSTY, base_acceptance=0.98)),
        "bursty16": ({}, _same(6, max_new_tokens=512, profile=BURSTY, base_acceptance=0.98)),
    }


@pytest.fixture(scope="module")
def compiled():
    c = load("stages/xl_spec.xl")
    m = c.sim_module()
    assert m.ReqFlag.KV_PRESSURE == KV_PRESSURE
    assert (m.Profile.CONSTANT, m.Profile.STRUCTURED, m.Profile.BURSTY) == (CONSTANT, STRUCTURED, BURSTY)
    return c


_RUNS: dict[tuple[str, str], tuple[dict, list[dict], list[History]]] = {}


@pytest.fixture(scope="module")
def traced(compiled):
    """traced(backend, name) -> (params, inputs, histories), each run once per backend."""
    specs = run_specs(compiled.sim_module())

    def get(backend: str, name: str):
        key = (backend, name)
        if key not in _RUNS:
            params, inputs = specs[name]
            config = LaunchConfig(max_active=16, max_rounds=50_000)
            if backend == "sim":
                result = sim.run(compiled.sim_module(), params, inputs, config)
            elif backend == "cpu":
                result = cpu.run(compiled, params, inputs, config)
            else:
                mode = "fast" if backend == "gpu-fast" else "deterministic"
                result = gpu.run(compiled, params, inputs, config, mode=mode)
            _RUNS[key] = (params, inputs, histories(compiled.program, result))
        return _RUNS[key]

    yield get
    _RUNS.clear()


def _pressure(req: dict) -> bool:
    return bool(req.get("req_flags", 0) & KV_PRESSURE)


# ---- the tests ---------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["mixed", "pressure", "ten_then_one", "constant", "structured", "bursty",
                                  "sustained", "sustained_from_zero", "rejection"])
def test_every_step_follows_the_design_rules_bit_for_bit(traced, backend, name):
    params, inputs, hs = traced(backend, name)
    ema_init = f32(params.get("asbs_ema_init", 0.8))
    steps = 0
    for req, h in zip(inputs, hs):
        check_asbs_exact(h, _pressure(req), ema_init, backend)
        steps += len(h.steps)
    assert steps > 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_sustained_acceptance_raises_the_ema_and_b_converges_to_8(traced, backend):
    for name, expected_start in (("sustained", [8]), ("sustained_from_zero", [1, 1, 1, 1, 4, 4, 4, 4, 8])):
        _, _, hs = traced(backend, name)
        for h in hs:
            assert all(s.accepted == s.proposed for s in h.steps)
            emas = [s.ema for s in h.steps]
            # Rising until binary32 rounding leaves it at its fixed point.
            for a, b in zip(emas, emas[1:]):
                assert b > a or b == a == emas[-1], emas
            assert emas[-1] > 0.99
            history = h.block_size_history
            assert len(history) > len(expected_start) + 5
            assert history[:len(expected_start)] == expected_start, (name, history)
            assert set(history[len(expected_start):]) == {8}, (name, history)


@pytest.mark.parametrize("backend", BACKENDS)
def test_sustained_rejection_lowers_the_ema_until_b_is_1(traced, backend):
    _, _, hs = traced(backend, "rejection")
    for h in hs:
        assert all(s.accepted == 0 and s.committed == 1 for s in h.steps)
        emas = [s.ema for s in h.steps]
        assert all(b < a for a, b in zip(emas, emas[1:]))
        history = h.block_size_history
        # 0.8 -> 0.64 -> 0.512 -> 0.4096: B = 8, 4, 4, then 1 for good.
        assert history[:4] == [8, 4, 4, 1] and set(history[3:]) == {1}, history


@pytest.mark.parametrize("backend", BACKENDS)
def test_kv_pressure_caps_b_at_2(traced, backend):
    _, inputs, hs = traced(backend, "pressure")
    capped_high, capped_low = 0, 0
    for req, h in zip(inputs, hs):
        history = h.block_size_history
        if _pressure(req):
            assert max(history) <= 2, (req, history)
            capped_high += history.count(2)
            capped_low += history.count(1)
            if req["base_acceptance"] == 1.0 and req["profile"] == CONSTANT:
                assert set(history) == {2}  # uncapped, ASBS would choose 8 throughout
        else:
            assert set(history) == {8}  # the cap applies only to flagged requests
    assert capped_high > 0 and capped_low > 0
    # The mixed run: some requests flagged, some not.
    _, inputs, hs = traced(backend, "mixed")
    flagged = [h for req, h in zip(inputs, hs) if _pressure(req)]
    assert flagged and all(max(h.block_size_history) <= 2 for h in flagged)
    assert any(8 in h.block_size_history for req, h in zip(inputs, hs) if not _pressure(req))


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_rejection_after_ten_acceptances_does_not_drop_b_to_1(traced, backend):
    # Constructed: ten whole-block acceptances, then a step in the low phase.
    _, _, hs = traced(backend, "ten_then_one")
    full_rejections = 0
    for h in hs:
        assert [s.accepted for s in h.steps[:10]] == [8] * 10, h.steps[:11]
        eleventh = h.steps[10]
        assert eleventh.n_out == 90 and eleventh.accepted < eleventh.proposed
        assert eleventh.block >= 4, h.block_size_history
        full_rejections += eleventh.accepted == 0
    assert full_rejections >= 4  # the worst case, r = 0, occurred
    # Wherever it happens in any run: ten whole acceptances, then a rejection (r < 1).
    seen = 0
    for name in ("mixed", "constant", "structured", "bursty", "bursty16"):
        params, inputs, hs = traced(backend, name)
        for req, h in zip(inputs, hs):
            if _pressure(req):
                continue
            whole = [s.accepted == s.proposed for s in h.steps]
            for k in range(10, len(h.steps)):
                if all(whole[k - 10:k]) and not whole[k]:
                    assert h.steps[k].block != 1, (name, h.req, k, h.block_size_history)
                    seen += 1
    assert seen > 0


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fixed_block", [1, 4, 8])
def test_the_fixed_policy_keeps_b_constant(traced, backend, fixed_block):
    """fixed_block > 0 is the baseline: B never changes, whatever the acceptance, and KV
    pressure does not cap it (stages/asbs.xl, next_block_size). The EMA is still tracked."""
    _, inputs, hs = traced(backend, f"fixed{fixed_block}")
    for req, h in zip(inputs, hs):
        assert set(h.block_size_history) == {fixed_block}, (req, h.block_size_history)
        ema = EMA_INIT
        for s in h.steps:
            assert s.proposed == min(fixed_block, h.token_limit - s.n_out)
            ema = design_ema(ema, design_ratio(s.accepted, s.proposed))
            assert s.ema_bits == f32_bits(ema)
    assert sum(len(h.steps) for h in hs) > 100


# ---- the profiles' signatures --------------------------------------------------------------

def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs)


def _acceptance(steps) -> float:
    """Accepted over proposed tokens, pooled over steps."""
    return sum(s.accepted for s in steps) / max(1, sum(s.proposed for s in steps))


@pytest.mark.parametrize("backend", BACKENDS)
def test_constant_profile_high_acceptance_gives_8_low_gives_1_or_2(traced, backend):
    _, inputs, hs = traced(backend, "constant")
    for req, h in zip(inputs, hs):
        blocks = [s.block for s in h.steps]
        if req["base_acceptance"] > 0.9:
            assert blocks.count(8) >= 0.75 * len(blocks), blocks
        else:
            assert sum(b <= 2 for b in blocks) >= 0.75 * len(blocks), blocks


@pytest.mark.parametrize("backend", BACKENDS)
def test_structured_profile_is_high_early_dips_mid_answer_and_collapses_at_the_end(traced, backend):
    """structured -> creative -> tail: agreement boosted(base) for the first quarter of the
    answer, 0.5 * base up to its last eighth, then 0.125 * base."""
    _, inputs, hs = traced(backend, "structured")
    for req, h in zip(inputs, hs):
        limit = h.token_limit
        early = [s for s in h.steps if 4 * s.n_out < limit]
        mid = [s for s in h.steps if 4 * s.n_out >= limit and 8 * s.n_out < 7 * limit]
        tail = [s for s in h.steps if 8 * s.n_out >= 7 * limit]
        assert early and mid and tail
        assert _acceptance(early) > 0.9 > 0.65 > _acceptance(mid) > 0.3 > 0.25 > _acceptance(tail)
        # B: mostly 8 in the structured start (no lag: the EMA starts at 0.8) ...
        assert [s.block for s in early].count(8) >= 0.75 * len(early), h.block_size_history
        # ... lower in the creative middle (mostly 1, sometimes 4), and 1 at the end.
        assert _mean(s.block for s in mid) < 3
        assert [s.block for s in tail].count(1) >= 0.9 * len(tail)
        assert _mean(s.block for s in early) > _mean(s.block for s in mid) > _mean(s.block for s in tail)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bursty_profile_alternates_phases(traced, backend):
    """BURSTY: phases of burst_len tokens, agreement boosted(base) and 0.25 * base in turn."""
    for name, burst in (("bursty", 64), ("bursty16", 16)):
        _, _, hs = traced(backend, name)
        for h in hs:
            phases: dict[int, list[Step]] = {}
            for s in h.steps:
                phases.setdefault(s.n_out // burst, []).append(s)
            rates = {k: _acceptance(v) for k, v in phases.items()}
            for k, rate in rates.items():
                if k + 1 in rates:  # high, low, high, ... (each phase but the last, which may be cut short)
                    assert (rate > rates[k + 1]) == (k % 2 == 0), (name, h.req, rates)
            blocks = {k: [s.block for s in v] for k, v in phases.items()}
            if burst == 64:  # long phases: ASBS has time to follow them all the way
                for k, bs in blocks.items():
                    if 0 < k < max(blocks):
                        assert (8 if k % 2 == 0 else 1) in bs, (h.req, k, blocks)
            else:  # short phases: the EMA lags, but B still rises in every high phase
                highs = [_mean(bs) for k, bs in blocks.items() if k % 2 == 0 and 0 < k < max(blocks)]
                lows = [_mean(bs) for k, bs in blocks.items() if k % 2 == 1 and k < max(blocks)]
                assert min(highs) > 1 and _mean(highs) > _mean(lows), (h.req, blocks)
