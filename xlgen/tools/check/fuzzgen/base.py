"""The Generator: a program and its launches from one seed (random.Random(seed)); its
productions are in the mixins it is built from (expressions, statements, program)."""

from __future__ import annotations
import random
from .expressions import ExpressionGen
from .model import Arr, Helper, NASTY_NAMES, SCALARS, Sym, _NOT_NAMES
from .procs import ProcGen
from .program import ProgramGen
from .statements import StatementGen


class Generator(ExpressionGen, StatementGen, ProcGen, ProgramGen):
    """One seed's program and launches."""

    def __init__(self, seed: int, nasty_names: bool = True, schedule_free: bool = False):
        self.seed = seed
        # per-request stages only, no pools: every request's results are independent of the
        # schedule, so fast mode must reproduce them exactly (docs/semantics.md §15)
        self.schedule_free = schedule_free
        self.rng = random.Random(seed)
        self.shape_rng = random.Random(f"shapes {seed}")  # new shapes on streams of their own
        self.tile_rng = random.Random(f"tile lets {seed}")
        self.pool_rows_rng = random.Random(f"pool rows {seed}")
        self.runs_rng = random.Random(f"reduction runs {seed}")
        self.matvec_rng = random.Random(f"matvec sums {seed}")
        self.page_rng = random.Random(f"page sums {seed}")
        self.stop_rng = random.Random(f"sum stops {seed}")
        self.prelude_rng = random.Random(f"tile preludes {seed}")
        self.tile_prelude_rng = random.Random(f"preludes reading tile lets {seed}")
        self.nasty = nasty_names and self.rng.random() < 0.5
        # How often an operation takes its error-prone form (a raw index, shift amount, divisor,
        # f32 -> int cast, builtin argument). Varied per program ("swarm testing"): some programs
        # fail early and often, others run all their rounds.
        self.risk = self.rng.choice([0.01, 0.05, 0.12, 0.3])
        self.used: set[str] = set()
        self.counter = 0
        self.consts: list[Sym] = []
        self.params: list[Sym] = []
        self.enums: dict[str, list[str]] = {}
        self.flagsets: dict[str, list[str]] = {}
        self.fields: list[Sym] = []
        self.shared: list[Sym] = []
        self.helpers: list[Helper] = []
        self.tensors: list[tuple[str, tuple[int, ...]]] = []
        self.pools: list = []  # model.Pool
        self.owner = ""  # the shared i32 array owning the pools' pages
        self.count_field = ""
        self.lines: list[str] = []
        self.derived: list[str] = []  # names of generated-code functions of this program (fn_h1, stage_s2, ...)
        # procs (procs.py): how often a stage statement is a new proc's use (0 in most programs)
        self.proc_rate = 0.06 if random.Random(f"procs {seed}").random() < 0.3 else 0.0
        self.proc_nesting = 0
        self.proc_lines: list[str] = []

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def risky(self) -> bool:
        return self.rng.random() < self.risk

    def pick(self, seq):
        return self.rng.choice(list(seq))

    def fresh(self, prefix: str, avoid=(), nasty: bool = True) -> str:
        """A new global-unique name: mostly `prefix` + a number, sometimes one of NASTY_NAMES
        (never with nasty False: then the main stream of choices is not drawn from)."""
        if nasty and self.nasty and self.chance(0.25):
            options = [n for n in NASTY_NAMES + self.derived
                       if n not in self.used and n not in _NOT_NAMES and n not in avoid]
            if options:
                name = self.pick(options)
                self.used.add(name)
                return name
        while True:
            self.counter += 1
            name = f"{prefix}{self.counter}"
            if name not in _NOT_NAMES and name not in self.used:
                break
        self.used.add(name)
        return name

    def sep(self) -> str:
        """The space between a binary operator and its right operand: rarely a line break (and a comment)."""
        r = self.rng.random()
        if r < 0.02:
            return "\n            "
        if r < 0.025:
            return "  # a comment inside an expression\n            "
        return " "

    def kind(self, t) -> str:
        if isinstance(t, Arr):
            return "array"
        if t in SCALARS:
            return t
        return "enum" if t in self.enums else "flags"

    def all_types(self) -> list[str]:
        return list(SCALARS) + list(self.enums) + list(self.flagsets)
