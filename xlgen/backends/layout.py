"""Memory layout of request and shared state: every scalar is one 32-bit word.

The C++ struct, the numpy dtype the host uses to fill and read it, and the
simulator's field order all come from here, so they cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core import ir

_NUMPY = {"i": "<i4", "u": "<u4", "f": "<f4"}


@dataclass(frozen=True)
class Slot:
    name: str  # the .xl field name
    word: str  # "i" | "u" | "f" (ir.storage_word)
    count: int  # 1 for scalars, the length for arrays
    offset: int  # in 32-bit words from the start of the struct
    is_array: bool
    type: ir.Type


def slots(fields: tuple[ir.FieldDecl, ...]) -> list[Slot]:
    out, offset = [], 0
    for f in fields:
        elem = f.type.elem if isinstance(f.type, ir.ArrayType) else f.type
        count = f.type.length if isinstance(f.type, ir.ArrayType) else 1
        out.append(Slot(f.name, ir.storage_word(elem), count, offset, isinstance(f.type, ir.ArrayType), f.type))
        offset += count
    return out


def words(fields: tuple[ir.FieldDecl, ...]) -> int:
    return sum(s.count for s in slots(fields))


def dtype(fields: tuple[ir.FieldDecl, ...]) -> np.dtype:
    """A numpy dtype with exactly the C++ struct's layout (at least one word)."""
    spec = [(s.name, _NUMPY[s.word], (s.count,)) if s.is_array else (s.name, _NUMPY[s.word]) for s in slots(fields)]
    if not spec:
        spec = [("_empty", "<u4")]
    return np.dtype(spec)


def dtype_from_layout(layout) -> np.dtype:
    """The dtype for a generated module's REQUEST_LAYOUT / SHARED_LAYOUT table."""
    spec = [(name, _NUMPY[word], (count,)) if is_array else (name, _NUMPY[word])
            for name, _attr, word, count, is_array in layout]
    return np.dtype(spec or [("_empty", "<u4")])


def module_dtypes(module) -> tuple[np.dtype, np.dtype]:
    return dtype_from_layout(module.REQUEST_LAYOUT), dtype_from_layout(module.SHARED_LAYOUT)


def collective_frame_words(program: ir.Program) -> int:
    """Words of the largest collective stage's frame (its top-level locals, a word each)."""
    counts = [sum(isinstance(st, (ir.Let, ir.Collective)) for st in s.body)
              for s in program.stages if s.is_collective]
    return max(counts + [1])
