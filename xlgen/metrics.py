"""Metrics computed from traces: per-request series of a traced field, and the
bundled pipeline's speculation summary (acceptance, block sizes) by profile.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import ir
from .runtime.sim import REC_HEADER, RunResult


def _word_offset(program: ir.Program, trace: ir.Trace, name: str) -> tuple[int, ir.Type]:
    offset = 0
    for f in trace.fields:
        decl = program.field(f)
        if f == name:
            return offset, decl.type
        offset += decl.type.length if isinstance(decl.type, ir.ArrayType) else 1
    raise KeyError(f"field '{name}' is not traced at stage '{trace.stage}'")


def decode_words(words: np.ndarray, t: ir.Type) -> np.ndarray:
    words = np.asarray(words, dtype=np.uint32)
    kind = ir.storage_word(t)
    if kind == "f":
        return words.view(np.float32)
    if kind == "i":
        return words.view(np.int32)
    return words


def trace_series(program: ir.Program, result: RunResult, stage: str, field: str) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """{request id: (rounds, values)} of `field` each time `stage` ran (its trace)."""
    trace = next((t for t in program.traces if t.stage == stage), None)
    if trace is None:
        raise KeyError(f"stage '{stage}' is not traced")
    offset, t = _word_offset(program, trace, field)
    rows = result.records[result.records[:, 2] == trace.index]
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    if len(rows) == 0:
        return out
    values = decode_words(rows[:, REC_HEADER + offset], t)
    ids = rows[:, 0].astype(np.int64)
    for req in np.unique(ids):
        mask = ids == req
        out[int(req)] = (rows[mask, 1].astype(np.int64), values[mask])
    return out


@dataclass
class ProfileRow:
    profile: str
    requests: int
    tokens: int
    proposed: int
    accepted: int
    steps: int
    mean_block: float
    var_block: float

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def mean_accepted_length(self) -> float:
        return self.accepted / self.steps if self.steps else 0.0


def speculation_summary(program: ir.Program, result: RunResult) -> list[ProfileRow]:
    """The bundled pipeline's per-profile summary (needs its fields and traces)."""
    profile_type = program.field("profile").type
    blocks = trace_series(program, result, "spec_verify", "current_block_size")
    reqs = result.requests
    rows = []
    for value, name in enumerate(profile_type.members):
        ids = np.nonzero(reqs["profile"] == value)[0]
        if len(ids) == 0:
            continue
        history = np.concatenate([blocks[i][1] for i in ids if i in blocks] or [np.zeros(0)])
        rows.append(ProfileRow(
            profile=name,
            requests=len(ids),
            tokens=int(reqs["n_out"][ids].sum()),
            proposed=int(reqs["total_proposed"][ids].sum()),
            accepted=int(reqs["total_accepted"][ids].sum()),
            steps=int(reqs["iterations"][ids].sum()),
            mean_block=float(history.mean()) if len(history) else 0.0,
            var_block=float(history.var()) if len(history) else 0.0,
        ))
    return rows


def format_summary(rows: list[ProfileRow]) -> str:
    header = f"{'profile':<11} {'requests':>8} {'tokens':>8} {'accept':>7} {'mean acc len':>12} {'mean B':>7} {'var B':>7}"
    lines = [header, "-" * len(header)]
    for r in rows:
        lines.append(f"{r.profile:<11} {r.requests:>8} {r.tokens:>8} {r.acceptance_rate:>7.3f} "
                     f"{r.mean_accepted_length:>12.2f} {r.mean_block:>7.2f} {r.var_block:>7.2f}")
    return "\n".join(lines)


def block_size_trajectories(program: ir.Program, result: RunResult, req_ids) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """{request: (answer progress 0..1 at each speculation step, block size chosen there)}."""
    blocks = trace_series(program, result, "spec_verify", "current_block_size")
    commits = trace_series(program, result, "commit", "n_out")
    out = {}
    for i in req_ids:
        if i not in blocks:
            continue
        rounds, b = blocks[i]
        c_rounds, n_out = commits.get(i, (np.zeros(0, np.int64), np.zeros(0, np.int32)))
        # Tokens committed before each step: the last commit of an earlier round.
        before = np.searchsorted(c_rounds, rounds, side="left") - 1
        done = np.where(before >= 0, n_out[np.clip(before, 0, None)] if len(n_out) else 0, 0)
        limit = max(int(result.requests["token_limit"][i]), 1)
        out[i] = (done / limit, b)
    return out
