"""Typed IR -> C++ stage code shared by the CUDA mega-kernel and the CPU build.

Runtime errors must come out exactly as in the simulator (docs/semantics.md):
- a statement that can fail computes into temporaries, checks `err`, and only
  then assigns, so a failing statement has no effect;
- C++ leaves the order of operand evaluation unspecified, so each checked
  operation in a statement carries a key: its position in left-to-right
  evaluation order. `xl_err_set` keeps the error with the smallest key, which is
  the one the simulator (evaluating left to right) raises first. Operations
  after the first error see a substitute value (0), and can only record
  errors with larger keys.
"""

from __future__ import annotations

import zlib

from . import cpp_ops, grouping, names, ranges
from ..core import ir
from ..core.subjects import Sites
from ..semantics.ops import ERROR_WORDS
from .layout import collective_frame_words, slots

IND = "    "
# A pool store by the code that runs it (CppEmitter.field_store): ordinary stage code, one thread
# of the team; an iteration holding reductions, one lane of its warp; a lanes loop's iteration,
# its own thread (None: a plain store). Pools are in global memory, never in a request's slot.
POOL_STORE = {"XL_WARP_STORE": "XL_POOL_STORE", "XL_ITER_STORE": "XL_POOL_ITER_STORE", "XL_LANE_STORE": None}
# Whether an operation can fail (ranges.py): never; only in a versioned lanes loop's checked copy
# (the fast copy runs with the check proved away); or at any time.
NEVER, CHECKED_COPY, ALWAYS = 0, 1, 2


def _safe_index(e: ir.Expr) -> bool:
    """Whether `e` can be evaluated for any values of what it reads, its array reads guarded
    (CppEmitter._reads_ahead): locals, constants, fields, launch parameters, reads of request or
    launch arrays, and operations that cannot fail (no division, no checked cast, no call)."""
    for x in ranges.subexpressions(e):
        if isinstance(x, ir.Load):
            if x.base.kind == ir.SHARED or x.type == ir.BOOL:
                return False
        elif isinstance(x, ir.Binary):
            if cpp_ops.binary_is_checked(x):
                return False
        elif isinstance(x, ir.Cast):
            if cpp_ops.cast_is_checked(x):
                return False
        elif not isinstance(x, (ir.Var, ir.Const, ir.Unary, ir.Select)):
            return False
    return True


def _packed(names) -> str:
    """C++ for enumerators packed 4 bits each, the first in the lowest (xl_nibble)."""
    return " | ".join(f"(uint32_t){n} << {4 * k}" for k, n in enumerate(names)) or "0u"


def _greatest(s: ir.Reduce) -> str:
    """Whether a max/min-like reduction keeps the greatest element, as C++."""
    return "true" if s.op in ("max", "argmax") else "false"


def _column(array: str, j: int) -> str:
    """Collective j's word of a segment's results or contributions (a column each, xl_stride apart)."""
    return f"{array}[{j} * xl_stride]" if j else f"{array}[0]"


class CppEmitter:
    def __init__(self, program: ir.Program):
        self.program = program
        self.key = 0  # evaluation-order key of the next checked operation in this statement
        self.line = 0
        self.bail = "return err;"
        self.conds = 0  # names the temporaries of conditions that may fail
        self.uses_err = False  # the code emitted names `err` (a check's sink or a call)
        # How a request field is stored: None, plainly; per-request stages: XL_WARP_STORE (one lane
        # of the team); a lanes loop: XL_LANE_STORE (each lane its own element); a lanes loop whose
        # iterations hold reductions: XL_ITER_STORE (one lane of the iteration's warp).
        self.field_store: str | None = None
        self.in_collective = False  # emitting a collective stage: shared writes go to the shadow
        self.proofs = ranges.Proofs()  # the checks of the code being emitted that cannot fail
        self.fast = False  # in a versioned lanes loop's body: `xl_chk` is its XlCheck
        self.after_lanes = False  # the statement being emitted follows a lanes loop in its block
        self.team_touches = False  # the stage's own code records what it touches (stage())
        self.sites = Sites(program)  # what each check names when it fails (docs/semantics.md §12)
        self.in_function: str | None = None  # the helper being emitted (its array parameters are subjects)
        # id(subexpression), or ("page", id(pool read)), -> the C++ name holding its value
        self.hoisted: dict[object, str] = {}
        self.stage_name = ""  # the stage being emitted
        self.line_sites: list[str] = []  # XL_LINE_MARK(k) of -DXL_PROFILE_LINES marks site k's file:line

    def array_site(self, base: ir.Var) -> int:
        return self.sites.array(base, self.in_function)

    # ---- which checks remain (ranges.py) ----------------------------------------------

    def _check(self, node, k, checked=True) -> int:
        """NEVER, CHECKED_COPY or ALWAYS for check k of `node` (an index, or "div")."""
        proof = self.proofs.proof(node, k) if checked else ranges.ALWAYS
        if not checked or proof == ranges.ALWAYS:
            return NEVER
        return CHECKED_COPY if proof == ranges.IN_FAST_PATH and self.fast else ALWAYS

    def _index(self, node, k, code: str, length: int, where: int, checked=True, as_int=False) -> str:
        """An index checked against `length` unless proved in range; `where` is the check's site.
        as_int: an index proved in range is converted to int32_t (xl_idx gives one; the index
        itself goes to it unconverted, so a u32 out of range is reported as the u32 it is)."""
        level = self._check(node, k, checked)
        if level == NEVER:
            return f"(int32_t)({code})" if as_int else code
        runner = "xl_idx_v(xl_chk, " if level == CHECKED_COPY else "xl_idx("
        return f"{runner}{self._sink()}, {code}, {length}, {where})"

    def raises(self, e) -> int:
        """The level at which evaluating `e` may raise a runtime error (ir.may_raise, with the
        proofs)."""
        if e is None:
            return NEVER
        if isinstance(e, ir.Load):
            return max(self._check(e, 0, e.checked), self.raises(e.index))
        if isinstance(e, ir.TensorLoad):
            return max([self._check(e, k, c) for k, c in enumerate(e.checked)]
                       + [self.raises(i) for i in e.indices])
        if isinstance(e, ir.PoolLoad) and ("page", id(e)) in self.hoisted:  # its page checked before
            return max([NEVER] + [self._check(e, k, c) for k, c in enumerate(e.checked) if k > 0]
                       + [self.raises(i) for i in e.indices[1:]])
        if isinstance(e, (ir.PoolLoad, ir.Call, grouping.PoolPage)) and not ir.infallible_call(e):
            return ALWAYS  # NOT_OWNER; helpers and builtins may raise inside (but ir.INFALLIBLE_BUILTINS)
        own = NEVER
        if isinstance(e, ir.Binary) and cpp_ops.binary_is_checked(e):
            own = self._check(e, "div") if e.op in ("/", "%") else ALWAYS
        if isinstance(e, ir.Cast) and cpp_ops.cast_is_checked(e):
            own = ALWAYS
        return max([own] + [self.raises(c) for c in ranges.children(e)])

    def _bail_if(self, level: int, pad: str) -> list[str]:
        """The test after a statement that may fail, at its level."""
        if level == ALWAYS:
            return [f"{pad}if (xl_failed(err)) {self.bail}"]
        if level == CHECKED_COPY:
            return [f"{pad}if (XL_CHECKS(xl_chk) && xl_failed(err)) {self.bail}"]
        return []

    # ---- expressions -------------------------------------------------------------

    def _sink(self) -> str:
        self.uses_err = True
        self.key += 1
        return f"err, {self.key}, {self.line}"

    def expr(self, e: ir.Expr) -> str:
        if id(e) in self.hoisted:
            return self.hoisted[id(e)]
        return getattr(self, "expr_" + type(e).__name__)(e)

    def expr_Const(self, e: ir.Const) -> str:
        if e.name is not None:
            if isinstance(e.type, ir.EnumType):
                return f"{names.cpp(e.type.name)}::{names.cpp(e.name)}"
            if e.name in self.program.consts:
                return names.cpp(e.name)
        return cpp_ops.literal(e.value, e.type)

    def expr_Var(self, e: ir.Var) -> str:
        return {
            ir.LOCAL: names.cpp(e.name),
            ir.FIELD: f"r.{names.cpp(e.name)}",
            ir.SHARED: f"sh.{names.cpp(e.name)}",
            ir.PARAM: f"p.{names.cpp(e.name)}",
            ir.REQ_ID: "req_id",
        }[e.kind]

    def expr_Load(self, e: ir.Load) -> str:
        index = self._index(e, 0, self.expr(e.index), e.base.type.length, self.array_site(e.base), e.checked)
        read = self.hoisted.get(("read", id(e)))  # read before the elements' conditions (_reads_ahead)
        if read is None:
            value = f"{self.expr(e.base)}[{index}]"
        else:  # (its index still evaluated here, where the program evaluates it: the same errors,
            # its own check's and those of the array reads inside it)
            inner_reads = any(isinstance(x, ir.Load) for x in ranges.subexpressions(e.index))
            checked = inner_reads or self._check(e, 0, e.checked) != NEVER
            value = f"xl_then({index}, {read})" if checked else read
        return f"(bool){value}" if e.type == ir.BOOL else value

    def expr_TensorLoad(self, e: ir.TensorLoad) -> str:
        flat = ""
        for k, (index, dim, checked) in enumerate(zip(e.indices, e.dims, e.checked)):
            code = self._index(e, k, self.expr(index), dim, self.sites.of("tensor", e.tensor, k), checked, as_int=True)
            flat = code if k == 0 else f"({flat}) * {dim} + {code}"
        return f"p.{names.cpp(e.tensor)}[{flat}]"

    def _pool_element(self, e) -> str:
        """The flat position of a pool element: each index checked against its dimension, then
        the page's owner (the key after every index's: §13.3's order), row-major."""
        name = e.pool.name
        hoisted = self.hoisted.get(("page", id(e)))  # its page, checked once for a tile (grouping.PoolPage)
        codes = [hoisted if k == 0 and hoisted else
                 self._index(e, k, self.expr(index), dim, self.sites.of("pool", name, k), checked, as_int=True)
                 for k, (index, dim, checked) in enumerate(zip(e.indices, e.pool.dims, e.checked))]
        flat = codes[0] if hoisted else self._pool_page(e, codes[0])
        for code, dim in zip(codes[1:], e.pool.dims[1:]):
            flat = f"({flat}) * {dim} + {code}"
        return flat

    def _pool_page(self, e, index_code: str) -> str:
        """A pool read's page, `index_code` (checked), then its owner checked."""
        owner = self.expr(self.program.pool_owner(e.pool))
        return f"xl_pool_page({self._sink()}, {self.sites.of('pool', e.pool.name)}, {owner}, req_id, {index_code})"

    def expr_PoolPage(self, e: grouping.PoolPage) -> str:
        load = e.load
        index = self._index(load, 0, self.expr(load.indices[0]), load.pool.dims[0],
                            self.sites.of("pool", load.pool.name, 0), load.checked[0], as_int=True)
        return self._pool_page(load, index)

    def expr_PoolLoad(self, e: ir.PoolLoad) -> str:
        return f"p.{names.cpp(e.pool.name)}[{self._pool_element(e)}]"

    def expr_Unary(self, e: ir.Unary) -> str:
        return cpp_ops.unary_code(e, self.expr(e.operand))

    def expr_Binary(self, e: ir.Binary) -> str:
        a, b = self.expr(e.left), self.expr(e.right)
        if not cpp_ops.binary_is_checked(e):
            return cpp_ops.binary_code(e, a, b)
        level = self._check(e, "div") if e.op in ("/", "%") else ALWAYS
        if level == NEVER:  # a divisor proved non-zero
            return f"xl_{'div' if e.op == '/' else 'rem'}_nz({a}, {b})"
        if level == CHECKED_COPY:
            return f"xl_{'div' if e.op == '/' else 'rem'}_v(xl_chk, {self._sink()}, {a}, {b})"
        return cpp_ops.binary_code(e, a, b, self._sink())

    def expr_Select(self, e: ir.Select) -> str:
        return f"({self.expr(e.cond)} ? {self.expr(e.then)} : {self.expr(e.otherwise)})"

    def expr_Cast(self, e: ir.Cast) -> str:
        a = self.expr(e.operand)
        return cpp_ops.cast_code(e, a, self._sink() if cpp_ops.cast_is_checked(e) else "")

    def expr_Intrinsic(self, e: ir.Intrinsic) -> str:
        return cpp_ops.intrinsic_code(e, [self.expr(a) for a in e.args])

    def expr_Call(self, e: ir.Call) -> str:
        args = []
        for a in e.args:
            code = self.expr(a)
            if isinstance(a.type, ir.ArrayType) and e.builtin:
                # builtins take `T[]` (pointer, length); helpers take `const T (&)[N]`, whose type holds the length
                args.append(f"{code}, {a.type.length}")
            else:
                args.append(code)
        if e.builtin:
            return f"xl_b_{e.func}({', '.join([self._sink()] + args)})"
        self.key += 1
        self.uses_err = True
        return f"fn_{e.func}({', '.join([f'err, {self.key}', 'p'] + args)})"  # helpers may read launch params

    def statement_expr(self, e: ir.Expr, line: int) -> str:
        """Start a new statement's key numbering, then emit `e`."""
        self.key = 0
        self.line = line
        return self.expr(e)

    # ---- statements --------------------------------------------------------------

    def block(self, stmts, depth: int, after_lanes: bool = False) -> list[str]:
        """`after_lanes`: the block starts right after a lanes loop, whatever ran before it (a loop's
        body that ends with one, entered after one: stmt_For)."""
        lines: list[str] = []
        previous = None
        for run in self._store_runs(ir.reduction_runs(stmts)):
            s = run[-1]
            self.after_lanes = isinstance(previous, ir.Lanes) or (previous is None and after_lanes)
            if self.team_touches and self._team_code() and not isinstance(s, ir.Lanes):
                touched = set().union(*(ir.state_access(x, own_only=True)[0] for x in run))
                if touched:  # (a cluster team's record of it: xl_team_loop)
                    lines.append(f"{IND * depth}XL_TOUCH({state_mask(touched)});")
            if len(run) > 1 and isinstance(s, ir.Assign):
                lines.extend(self._store_run(run, depth))
            elif len(run) > 1:
                lines.extend(self._reductions(run, depth))
            else:
                lines.extend(getattr(self, "stmt_" + type(s).__name__)(s, depth))
            previous = s
        return lines

    def stmt_Let(self, s: ir.Let, depth):
        pad = IND * depth
        value = self.statement_expr(s.value, s.loc.line)
        # [[maybe_unused]]: a local that is never read is valid xl (a warning there), and must not
        # fail the -Werror CPU build with -Wunused-variable / -Wunused-but-set-variable
        decl = f"{pad}[[maybe_unused]] {cpp_ops.value_type(s.type)} {names.cpp(s.name)} = {value};"
        return [decl] + self._bail_if(self.raises(s.value), pad)

    def stmt_Assign(self, s: ir.Assign, depth):
        if s.target.kind == ir.SHARED and self.in_collective:
            return self._shadow_write(s, "xl_shadow_put(xw, {word}, xl_word_bits(xl_v));", depth)
        pad = IND * depth
        elem, value, target, index = self._store_operands(s)
        level = self.raises(s.value)
        if s.index is not None:
            level = max(level, self._check(s, 0, s.checked), self.raises(s.index))
        if level == NEVER:
            lhs = f"{target}[{index}]" if index is not None else target
            return [f"{pad}{self._store(s.target, lhs, value)}"]
        lines = [f"{pad}{{", f"{pad}{IND}const {cpp_ops.value_type(elem)} xl_v = {value};"]
        if index is not None:
            lines.append(f"{pad}{IND}const int32_t xl_i = {index};")
        lines += self._bail_if(level, pad + IND)
        lines.append(f"{pad}{IND}{self._store(s.target, target + ('[xl_i]' if index is not None else ''), 'xl_v')}")
        return lines + [f"{pad}}}"]

    def _store_operands(self, s: ir.Assign) -> tuple[ir.Type, str, str, str | None]:
        """A field store's element type, value, target and index (None: no index), emitted in
        that order: the value first, then the index, as in Python."""
        elem = s.target.type.elem if s.index is not None else s.target.type
        value = self.statement_expr(s.value, s.loc.line)
        target = self.expr(s.target)
        index = None
        if s.index is not None:
            index = self._index(s, 0, self.expr(s.index), s.target.type.length, self.array_site(s.target), s.checked)
        return elem, value, target, index

    def _plain_store(self, s) -> bool:
        """An ordinary stage's store of a request field that cannot fail and calls nothing: one of a
        run of them shares its barriers (_store_runs)."""
        return (self.field_store == "XL_WARP_STORE" and isinstance(s, ir.Assign) and s.target.kind == ir.FIELD
                and self.raises(s.value) == NEVER and self.raises(s.index) == NEVER
                and (s.index is None or self._check(s, 0, s.checked) == NEVER)
                and not ir.state_access((s.value, s.index))[1])

    def _store_runs(self, runs: list[list]) -> list[list]:
        """`runs` with each stretch of plain stores (_plain_store) of which none reads a field an
        earlier one writes joined into one run: all their values can be computed first, and one
        thread stores them between a single pair of barriers (XL_WARP_STORES), not a pair each."""
        out: list[list] = []
        current: list | None = None  # the run of plain stores a next one may join
        written: set[str] = set()  # the fields it writes
        for run in runs:
            s = run[0]
            if len(run) > 1 or not self._plain_store(s):
                current = None
                out.append(list(run))
            elif current is not None and not (ir.state_access((s.value, s.index))[0] & written):
                current.append(s)
                written.add(s.target.name)
            else:
                current, written = [s], {s.target.name}
                out.append(current)
        return out

    def _store_run(self, run: list[ir.Assign], depth: int) -> list[str]:
        pad = IND * depth
        lines, puts = [f"{pad}{{"], []
        for n, s in enumerate(run):
            elem, value, lhs, index = self._store_operands(s)
            lines.append(f"{pad}{IND}const {cpp_ops.value_type(elem)} xl_v{n} = {value};")
            if index is not None:
                lines.append(f"{pad}{IND}const int32_t xl_i{n} = {index};")
                lhs += f"[xl_i{n}]"
            puts.append(f"XL_RUN_PUT({lhs}, xl_v{n})")
        return lines + [f"{pad}{IND}XL_WARP_STORES({' '.join(puts)});", f"{pad}}}"]

    def stmt_PoolStore(self, s: ir.PoolStore, depth):
        pad = IND * depth
        value = self.statement_expr(s.value, s.loc.line)  # the value first, then the indices: as in Python
        element = self._pool_element(s)
        store = POOL_STORE[self.field_store]
        lhs = f"p.{names.cpp(s.pool.name)}[xl_i]"
        return [f"{pad}{{", f"{pad}{IND}const {cpp_ops.value_type(s.pool.elem)} xl_v = {value};",
                f"{pad}{IND}const int32_t xl_i = {element};", f"{pad}{IND}if (xl_failed(err)) {self.bail}",
                f"{pad}{IND}{store}({lhs}, xl_v);" if store else f"{pad}{IND}{lhs} = xl_v;", f"{pad}}}"]

    def stmt_Accumulate(self, s: ir.Accumulate, depth):
        return self._shadow_write(s, "xl_shadow_add(xw, {word}, xl_word_bits(xl_v));", depth)

    def _shadow_write(self, s, call: str, depth) -> list[str]:
        """A shared write in a collective stage: the value, then the index (§8), then the
        shadow word of the element (xl_runtime.cuh: it takes effect at the stage's end)."""
        pad = IND * depth
        elem = s.target.type.elem if s.index is not None else s.target.type
        lines = [f"{pad}{{", f"{pad}{IND}const {cpp_ops.value_type(elem)} xl_v = {self.statement_expr(s.value, s.loc.line)};"]
        element = self.expr(s.target)
        if s.index is not None:
            index = self.expr(s.index)
            if s.checked:
                index = f"xl_idx({self._sink()}, {index}, {s.target.type.length}, {self.array_site(s.target)})"
            lines.append(f"{pad}{IND}const int32_t xl_i = {index};")
            element += "[xl_i]"
        lines.append(f"{pad}{IND}if (xl_failed(err)) {self.bail}")
        lines.append(f"{pad}{IND}{call.format(word=f'xl_word_of(&sh, &{element})')}")
        return lines + [f"{pad}}}"]

    def collective_stage(self, s: ir.Stage) -> dict:
        """A collective stage's body cut at its collectives, which one pass combines in groups
        (ir.collective_groups): segment k runs after group k - 1, its results in `xl_in`, and
        ends with group k's contributions in `xl_out`. Within a segment the top-level locals
        are plain locals (registers); between segments they wait in the frame `xl_frame`:
        loaded at a segment's start, stored at its end."""
        segments, groups = ir.collective_groups(s.body)
        self.in_collective = True
        frame = [(st.name, st.type) for st in s.body if isinstance(st, (ir.Let, ir.Collective))]
        carried: list[tuple[str, ir.Type]] = []  # top-level locals declared in earlier segments
        cases = []
        for k, stmts in enumerate(segments):
            pad = IND * 2
            lines = [f"{pad}[[maybe_unused]] {cpp_ops.value_type(t)} {names.cpp(n)} = xl_frame.{names.cpp(n)};"
                     for n, t in carried]
            for j, c in enumerate(groups[k - 1] if k > 0 else []):
                lines.append(f"{pad}[[maybe_unused]] {cpp_ops.value_type(c.type)} {names.cpp(c.name)} = "
                             f"xl_from_bits<{cpp_ops.value_type(c.type)}>({_column('xl_in', j)});")
                carried.append((c.name, c.type))
            lines += self.block(stmts, 2)
            carried += [(st.name, st.type) for st in stmts if isinstance(st, ir.Let)]
            for j, c in enumerate(groups[k] if k < len(groups) else []):
                value = self.statement_expr(c.value, c.loc.line)
                lines += [f"{pad}{{", f"{pad}{IND}const {cpp_ops.value_type(c.value.type)} xl_v = {value};",
                          f"{pad}{IND}if (xl_failed(err)) {self.bail}",
                          f"{pad}{IND}{_column('xl_out', j)} = xl_word_bits(xl_v);", f"{pad}}}"]
            if k < len(groups):
                lines += [f"{pad}xl_frame.{names.cpp(n)} = {names.cpp(n)};" for n, _ in carried]
            cases.append(lines)
        self.in_collective = False
        word_kind = {"i": "XL_WORD_I", "u": "XL_WORD_U", "f": "XL_WORD_F"}
        return {
            "cases": cases,
            "frame": [(cpp_ops.value_type(t), names.cpp(n)) for n, t in frame],
            "groups": [", ".join(names.cpp(c.name) for c in g) for g in groups],
            # nothing to settle at the stage's end where it writes no shared state
            "writes_shared": "true" if ir.writes_shared(s.body) else "false",
            # the driver's tables (kernel.cuh's Stage_<name>), an entry per group (at least one):
            # the operations and word kinds packed 4 bits each, collective k at bit 4k
            "widths": [len(g) for g in groups] or [0],
            "ops": [_packed(f"XL_{c.op.upper()}" for c in g) for g in groups] or ["0u"],
            "words": [_packed(word_kind[ir.storage_word(c.value.type)] for c in g) for g in groups] or ["0u"],
        }

    def _store(self, target: ir.Var, lhs: str, value: str) -> str:
        if target.kind == ir.FIELD and self.field_store:
            return f"{self.field_store}({lhs}, {value});"
        return f"{lhs} = {value};"

    def stmt_If(self, s: ir.If, depth):
        return self._if_chain(list(s.arms), s.otherwise, depth)

    def _if_chain(self, arms, otherwise, depth) -> list[str]:
        pad = IND * depth
        cond, body = arms[0]
        code = _strip_parens(self.statement_expr(cond, cond.loc.line))
        lines = []
        level = self.raises(cond)
        if level:  # evaluate a condition that may fail on its own line, then branch
            self.conds += 1
            name = f"xl_c{self.conds}"
            lines += [f"{pad}const bool {name} = {code};", *self._bail_if(level, pad)]
            code = name
        lines.append(f"{pad}if ({code}) {{")
        lines += self.block(body, depth + 1)
        rest = arms[1:]
        if rest and not self.raises(rest[0][0]):
            chained = self._if_chain(rest, otherwise, depth)
            return lines + [f"{pad}}} else {chained[0].lstrip()}"] + chained[1:]
        if rest:
            lines.append(f"{pad}}} else {{")
            lines += self._if_chain(rest, otherwise, depth + 1)
        elif otherwise:
            lines.append(f"{pad}}} else {{")
            lines += self.block(otherwise, depth + 1)
        return lines + [f"{pad}}}"]

    def stmt_For(self, s: ir.For, depth):
        pad = IND * depth
        v = names.cpp(s.var)
        head = f"{pad}for (int32_t {v} = {s.start}; {v} < {s.stop}; ++{v}) {{"
        load = self._page_checked_once(s)
        if load is None:
            # A body that ends with a lanes loop, entered right after one and never continued
            # from its middle, starts after a lanes loop in every iteration (the forward pass's
            # layers: each layer's first loop needs no barrier on entry; stmt_Lanes).
            after = (self.after_lanes and bool(s.body) and isinstance(s.body[-1], ir.Lanes)
                     and not any(isinstance(x, ir.Continue) for x in ir.statements(s.body)))
            return [head, *self.block(s.body, depth + 1, after), f"{pad}}}"]
        # The page's checks before the loop, numbered as in its statement: the loop then holds no
        # check and no error test (attention's scores: 32 owner checks a score before).
        name = f"xl_page{depth}"
        code = self.statement_expr(grouping.PoolPage(load), s.body[0].loc.line)
        lines = [f"{pad}{{", f"{pad}{IND}const int32_t {name} = {code};", *self._bail_if(ALWAYS, pad + IND)]
        self.hoisted[("page", id(load))] = name
        try:
            body = self.block(s.body, depth + 2)
        finally:
            del self.hoisted[("page", id(load))]
        return [*lines, IND + head, *body, f"{pad}{IND}}}", f"{pad}}}"]

    def _page_checked_once(self, s: ir.For) -> ir.PoolLoad | None:
        """The pool read whose page's checks can go before the loop, once: a loop that runs, of one
        statement assigning a local, whose only check that may fail is one pool read's page (its
        index and its owner), the same in every iteration (its page index reads no local the loop
        sets). Its first iteration would fail there first, before any effect, with the same error."""
        if s.stop <= s.start or len(s.body) != 1:
            return None
        (st,) = s.body
        if not (isinstance(st, ir.Assign) and st.target.kind == ir.LOCAL and st.index is None):
            return None
        loads = [x for x in ranges.subexpressions(st.value) if isinstance(x, ir.PoolLoad)]
        if (len(loads) != 1 or not any(x is loads[0] for x in _always_evaluated(st.value))
                or grouping.locals_read(loads[0].indices[0]) & {s.var, st.target.name}):
            return None
        self.hoisted[("page", id(loads[0]))] = "(page)"  # (what raises() then sees: the rest's checks)
        try:
            rest = self.raises(st.value)
        finally:
            del self.hoisted[("page", id(loads[0]))]
        return loads[0] if rest == NEVER else None

    def _lane_bounds(self, s, depth) -> list[str]:
        """A lanes loop's or reduction's bounds, evaluated once, left to right."""
        pad = IND * depth
        start = self.statement_expr(s.start, s.loc.line)
        stop = self.expr(s.stop)
        lines = [f"{pad}const int32_t xl_lo = {start};", f"{pad}const int32_t xl_hi = {stop};"]
        return lines + self._bail_if(max(self.raises(s.start), self.raises(s.stop)), pad)

    def _lane_body(self, emit, field_store: str = "XL_LANE_STORE"):
        """Emit code that runs once per iteration or element: inside a lambda whose `err` is
        the iteration's own; a failing statement returns from it (xl_lanes, xl_reduce_*)."""
        saved = (self.bail, self.field_store)
        self.bail, self.field_store = "return;", field_store
        try:
            return emit()
        finally:
            self.bail, self.field_store = saved

    def stmt_Lanes(self, s: ir.Lanes, depth):
        pad = IND * depth
        outer_bail = self.bail
        after_lanes = self.after_lanes
        lines = [f"{pad}{{", *self._lane_bounds(s, depth + 1)]
        store = "XL_ITER_STORE" if s.by_warp else "XL_LANE_STORE"  # by_warp: a warp runs each iteration
        bound = self.proofs.fast_bound.get(id(s))
        limit = self.proofs.fast_limit.get(id(s))  # the fast path's test: hi <= limit (ranges.py)
        self.fast = bound is not None
        try:
            body = self._lane_body(lambda: self.block(s.body, depth + 2), store)
        finally:
            self.fast = False
        # A lanes loop right after another, with bounds that read no state (locals, constants,
        # launch parameters), needs no barrier on entry: the other loop's exit barrier is the
        # last thing the team did (xl_lanes in xl_runtime.cuh says why it needs one).
        entry = not (after_lanes and not any(_reads_state(b) for b in (s.start, s.stop)))
        # A loop that may write a pool says so (a team of several blocks then spreads it: xl_team_loop).
        pools = _may_write_pool(s.body)
        # What it may touch and write (xl_team_loop: whether a cluster team must sync on entry).
        masks = [ALL_STATE, ALL_STATE]
        if self.team_touches:
            touched, written = ir.state_access(s)
            masks = [state_mask(written), state_mask(touched)]
        flags = [s.by_warp, entry, pools, *masks]  # xl_lanes<ByWarp, EntrySync = true, Pools = false, Writes, Touches>
        defaults = [None, True, False, ALL_STATE, ALL_STATE]
        while len(flags) > 1 and flags[-1] == defaults[len(flags) - 1]:
            flags.pop()  # trailing defaults left out
        by_warp = ", ".join(str(f).lower() for f in flags)
        v = names.cpp(s.var)
        group = self._group_plan(s, grouping.plan(s, bound))
        tiles = self._group_plan(s, grouping.rows_plan(s))
        if group or tiles:  # its fast path in tiles: a row's positions, or rows of a position (grouping.py)
            entry_sync = "true" if entry else "false"
            split = group is not None or tiles.k is not None
            k, size = (group.k, group.size) if group else (tiles.k or _rows_hint(s, bound), 1)
            fast = f"xl_lo >= 0 && xl_hi <= {limit}" if bound is not None else ("xl_lo >= 0" if split else "true")
            extra = flags[2:]  # Pools, Writes, Touches (trailing defaults left out, as above)
            if group and self._group_checked(s, group):  # ..., GroupChecked (an A/B switch: XL_GROUP_CHECKED)
                extra = [pools, *masks, True]
            if group and group.preludes:  # (kept over a warp's tiles of one group of positions: _grouped_preludes)
                rows = ", xl_prelude_r0 = -1" if group.preludes_per_tile(s.var) else ""
                lines += [f"{pad}{IND}{cpp_ops.value_type(x.type)} xl_pre_{names.cpp(x.name)}[{group.size}] = {{}};"
                          for x in group.preludes] + [f"{pad}{IND}int32_t xl_prelude_t0 = -1, xl_prelude_n = 0{rows};"]
            lines.append(f"{pad}{IND}xl_lanes_grouped<{entry_sync}, {k}, {size}, {str(split).lower()}"
                         f"{''.join(', ' + str(f).lower() for f in extra)}>(err, 1, "
                         f"xl_lo, xl_hi, {fast}, [&]([[maybe_unused]] auto xl_chk, int32_t {v}, XlErr& err) {{")
        elif bound is None:
            lines.append(f"{pad}{IND}xl_lanes<{by_warp}>(err, 1, xl_lo, xl_hi, [&](int32_t {v}, XlErr& err) {{")
        else:  # versioned: the checks ranges.py proved for a range within 0..limit-1 go on the fast path
            lines.append(f"{pad}{IND}xl_lanes_v<{by_warp}>(err, 1, xl_lo, xl_hi, xl_lo >= 0 && xl_hi <= {limit}, "
                         f"[&](auto xl_chk, int32_t {v}, XlErr& err) {{")
        lines += body
        after = f"{pad}{IND}}}"  # closes the body's lambda; then the tiles' lambdas (or XlNone)
        if group or tiles:
            parts = [("[&](auto xl_rows, int32_t xl_row0, int32_t xl_t0, int32_t xl_n, XlLaneErr& xl_first) {",
                      lambda: self._grouped_body(s, group, depth + 2)) if group else ("XlNone{}", None),
                     ("[&](auto xl_rows, int32_t xl_t, int32_t xl_row0, int32_t xl_rlo, int32_t xl_rhi, "
                      "XlLaneErr& xl_first) {", lambda: self._rows_body(s, tiles, depth + 2)) if tiles
                     else ("XlNone{}", None)]
            for head, inner in parts:
                if inner is None:
                    after += f", {head}"
                else:
                    lines += [f"{after}, {head}", *inner()]
                    after = f"{pad}{IND}}}"
        lines += [f"{after});", f"{pad}{IND}if (xl_failed(err)) {outer_bail}", f"{pad}}}"]
        return lines + self._line_mark(s, depth)

    def _team_code(self) -> bool:
        """Whether statements are a per-request stage's own code, run by its whole team (not an
        iteration's or element's)."""
        return self.field_store == "XL_WARP_STORE" and self.bail == "return err;"

    def _line_mark(self, s, depth: int, what: str = "") -> list[str]:
        """-DXL_PROFILE_LINES's mark after a lanes loop or reduction of a per-request stage's own
        code (not inside an iteration or element): the team's cycles up to here (xl_runtime.cuh)."""
        if not self._team_code():
            return []
        self.line_sites.append(f"{s.loc.file}:{s.loc.line}")
        return [f"{IND * depth}XL_LINE_MARK({len(self.line_sites) - 1});  // {self.line_sites[-1]} in {self.stage_name}{what}"]

    def _group_plan(self, s: ir.Lanes, group):
        """A plan of grouping.py (plan, rows_plan) whose head cannot fail on the fast path: its
        lets and its sums' bounds never (the sums' elements may: a tile in which one did then
        runs as the checked loop does)."""
        if group is None:
            return None
        self.fast = True
        try:
            ok = all(self.raises(x.value) == NEVER for x in group.lets) and all(
                self.raises(r.start) == NEVER and self.raises(r.stop) == NEVER for r in group.sums)
        finally:
            self.fast = False
        return group if ok else None

    def _group_checked(self, s: ir.Lanes, group: grouping.Group) -> bool:
        """Whether a weight-once tile holds a sum that stops on its own or whose elements may fail
        (attention's weighted sum of V)."""
        self.fast = True
        try:
            return any(group.ragged(r, s.var) or self.raises(r.value) == ALWAYS for r in group.sums)
        finally:
            self.fast = False

    def _head_lets(self, lets, inner: str) -> list[str]:
        """The head's lets (cannot fail: _group_plan), evaluated where the iteration's are."""
        return [f"{inner}[[maybe_unused]] const {cpp_ops.value_type(x.type)} {names.cpp(x.name)} = "
                f"{self.statement_expr(x.value, x.loc.line)};" for x in lets]

    def _expr_and_err(self, e: ir.Expr, line: int) -> tuple[str, str]:
        """`e` in C++, and the declaration of the `err` its checks name (none if they name none)."""
        codes, err = self._parts_code([e], line)
        return codes[0], err

    def _tile_sums(self, sums, hoists, depth: int, declare, run, which: str, lets, order=None, bounds=None) -> list[str]:
        """A weight-once tile's sums, each into `xl_sums<k>` (declare(type, name): its declaration) by
        the runtime's `run(type, name, checked)` (xl_sum_tile; a tile of rows': _rows_sums). `hoists`, in the order
        they are searched, (name, moving, params): the parts of the element the same for every
        iteration of the tile that differ only in `params` (grouping.invariant_parts; `moving`:
        the names that may differ), computed once per element as `name` (several: a struct,
        `xl_w.p0` ...) by a lambda taking `params` (each a parameter, or None, and the names it
        binds to a value) and `j`, after the declarations (C++ lines) `hoists` may name fourth.
        A later search skips the parts found before it; a later part holding one of the first's
        reads it by name (the later lambdas and the element take the first's value). A weight-once
        tile has three, passed in `order`: the part the same for every iteration (xl_c: a norm's gain), for every
        row (xl_a: the activation) and for every position (xl_w: the weight). Then the element for
        iteration `which` (its parameters) after its `lets`. An element that may fail (`checked`)
        reports into the runtime's `err`. `bounds(r, depth)`: the sum's xl_lo and xl_hi
        (_lane_bounds: the same for every iteration)."""
        pad = IND * depth
        order = order or [h[0] for h in hoists]
        lines = []
        for k, r in enumerate(sums):
            t = cpp_ops.value_type(r.value.type)
            acc = f"xl_sums{k}"
            checked = self.raises(r.value) == ALWAYS
            lines += [f"{pad}{declare(t, acc)};", f"{pad}{{", *(bounds or self._lane_bounds)(r, depth + 1)]
            j = names.cpp(r.var)
            skip, pres, types, names_of = set(), {}, {}, {}
            for n, (name, moving, params, *head_lets) in enumerate(hoists):
                # (a part that may fail only where the element may: else its checks would go unseen)
                parts = [x for x in grouping.invariant_parts(r.value, moving, skip) if checked or self.raises(x) != ALWAYS]
                # (a checked page's read may be a later part, reading the page by name)
                skip |= {id(x.load.indices[0] if isinstance(x, grouping.PoolPage) else x) for x in parts}
                taken = "".join(f"int32_t {v}, " for v, _ in params if v) + f"int32_t {j}"
                taken += f", [[maybe_unused]] {types[hoists[0][0]]} {hoists[0][0]}" if n else ""
                taken += ", XlErr& err" if checked else ""  # checked: xl_shared_part
                codes, pre_err = self._parts_code(parts, r.loc.line)  # (reading the earlier parts by name)
                bound = "".join(f"[[maybe_unused]] const int32_t {names.cpp(b)} = {value}; "
                                for v, (bind, value) in params for b in bind)
                bound += "".join(x + " " for x in head_lets[0]) if head_lets else ""
                body = f"{bound}{'(void)err; ' if checked else pre_err}"
                types[name], pres[name], refs = _parts_lambda(name, parts, codes, taken, body)
                found = {self._part_key(x): ref for x, ref in zip(parts, refs)}
                names_of.update(found)
                if n == 0:
                    self.hoisted.update(found)
            self.hoisted.update(names_of)
            try:
                value, value_err = self._expr_and_err(r.value, r.loc.line)
            finally:
                for key in names_of:
                    self.hoisted.pop(key, None)
            elem_params = ", ".join(f"[[maybe_unused]] {types[name]} {name}" for name in order)
            err_param = ", XlErr& err" if checked else ""
            lines += [f"{pad}{IND}{run(t, acc, checked)}",
                      *(f"{pad}{IND * 2}{pres[name]}" for name in order),
                      f"{pad}{IND}[&]({which}, int32_t {j}, {elem_params}{err_param}) -> {t} {{",
                      *lets(pad + IND * 2),
                      f"{pad}{IND * 2}{'' if checked else value_err}return {value};",
                      f"{pad}{IND}}}){' == false) return false;' if checked else ';'}",
                      f"{pad}}}"]
        return lines

    @staticmethod
    def _part_key(x):
        """The key under which a hoisted part's C++ name is found (expr, expr_PoolPage)."""
        return ("page", id(x.load)) if isinstance(x, grouping.PoolPage) else id(x)

    def _parts_code(self, parts, line: int) -> tuple[list[str], str]:
        """Expressions (a tile's shared parts) in C++, numbered as one statement's checks, and the
        declaration of the `err` their checks name (none if they name none)."""
        saved, self.uses_err = self.uses_err, False
        try:
            self.key, self.line = 0, line  # (one statement's numbering for all of them)
            codes = [self.expr(x) for x in parts]
            return codes, ("XlErr err = {0, 0, 0}; " if self.uses_err else "")
        finally:
            self.uses_err = saved or self.uses_err

    def _tile_tail(self, s: ir.Lanes, sums, tail, depth: int, sum_of: str, store: str) -> list[str]:
        """One iteration's tail in a lambda of its own, so that a failing statement ends only
        that iteration (bail: return); its error is noted with its index. Its sums are
        xl_sums<k>`sum_of`; its stores `store`."""
        pad = IND * depth
        lines = [f"{pad}XlErr xl_e = {{0, 0, 0}};", f"{pad}[&](XlErr& err) {{"]
        lines += [f"{pad}{IND}[[maybe_unused]] {cpp_ops.value_type(r.type)} {names.cpp(r.name)} = xl_sums{k}{sum_of};"
                  for k, r in enumerate(sums)]
        self.bail, self.field_store = "return;", store
        self.after_lanes = False
        lines += self.block(tail, depth + 1)
        return lines + [f"{pad}}}(xl_e);", f"{pad}xl_lane_err_note(xl_first, {names.cpp(s.var)}, xl_e);"]

    def _grouped_body(self, s: ir.Lanes, g, depth) -> list[str]:
        """The fast path of a weight-once loop (xl_lanes_grouped): a tile of the iterations
        (xl_t0 + xl_g) * K + xl_row0 + xl_ri for xl_ri < xl_R rows and xl_g < xl_n positions. Their
        sums together (xl_sum_tile: the weight read once per element for all positions, the
        activation once for all rows, each sum in the order of §13.2, up to its own stop), then
        each iteration's tail, its own error noted. Sum xl_s of a tile is row xl_s % xl_R of
        position xl_s / xl_R. False where an element failed (a pool's owner check): the tile then
        runs as the checked loop does (xl_lanes_grouped)."""
        pad = IND * depth
        position, row = "xl_t0 + xl_g", "xl_row0 + xl_ri"
        size = f"xl_R * {g.size}"

        def iteration_lets(inner: str) -> list[str]:
            bound = [(s.var, f"({position}) * {g.k} + {row}")] + [(n, position) for n in g.positions] + [
                (n, row) for n in g.rows]
            return ([f"{inner}[[maybe_unused]] const int32_t {names.cpp(n)} = {value};" for n, value in bound]
                    + [inner + x for x in prelude_values] + self._head_lets(g.lets, inner))

        # each prelude's value for position xl_g of the tile (registers: xl_g is a constant where
        # the tile's sums read them, their loops over positions unrolled)
        prelude_values = [f"[[maybe_unused]] const {cpp_ops.value_type(x.type)} {names.cpp(x.name)} = "
                          f"xl_pre_{names.cpp(x.name)}[xl_g];" for x in g.preludes]
        lines = [f"{pad}[[maybe_unused]] constexpr XlCheck<false> xl_chk{{}};",
                 f"{pad}constexpr int xl_R = decltype(xl_rows)::value;"]
        saved = (self.bail, self.field_store, self.fast)
        self.fast = True
        lines += self._grouped_preludes(g, s.var, depth, position)
        # A tail without reductions runs on a lane, the iterations side by side (their sums left in
        # lanes by a transposed butterfly); else the warp runs each iteration's tail in turn.
        on_lanes = not any(isinstance(x, ir.Reduce) for x in ir.statements(g.tail))
        sums = (lambda t, acc: f"XlGroupSum<{t}, {size}> {acc}") if on_lanes else (lambda t, acc: f"{t} {acc}[{size}]")
        # xl_a: the activation, the same for every row of the tile, with the lets the same over
        # its rows (grouping.Rows.per_tile: `row = t * H + i / HEAD`) from its first row
        per_tile = [x for x in g.lets if x.name in g.per_tile(s.var)]
        hoists = [("xl_c", g.per_row(s.var) | g.per_position(s.var), []),
                  ("xl_a", g.per_row(s.var), [("xl_g", (g.positions, position)), (None, (g.rows if per_tile else (), "xl_row0"))],
                   prelude_values + self._head_lets(per_tile, "")),
                  ("xl_w", g.per_position(s.var), [("xl_ri", (g.rows, row))])]
        each = ["[[maybe_unused]] const int32_t xl_ri = xl_s % xl_R;", "[[maybe_unused]] const int32_t xl_g = xl_s / xl_R;"]

        def bounds(r: ir.Reduce, inner: int) -> list[str]:
            """A stop that reads the iteration (attention's causal range): xl_hi(xl_ri, xl_g)."""
            if not g.ragged(r, s.var):
                return self._lane_bounds(r, inner)
            p = IND * inner
            return [f"{p}const int32_t xl_lo = {self.statement_expr(r.start, r.loc.line)};",
                    f"{p}const auto xl_hi = [&](int32_t xl_ri, int32_t xl_g) -> int32_t {{", *iteration_lets(p + IND),
                    f"{p}{IND}return {self.expr(r.stop)};", f"{p}}};"]

        def run(t: str, acc: str, checked: bool) -> str:
            return (f"{'if (' if checked else ''}xl_sum_tile<{t}, xl_R, {g.size}{', true' if checked else ''}>"
                    f"(xl_lo, xl_hi, xl_n, {acc},")

        try:
            lines += self._tile_sums(g.sums, hoists, depth, sums, run, "int32_t xl_ri, int32_t xl_g", iteration_lets,
                                     order=["xl_w", "xl_a", "xl_c"], bounds=bounds)
            if on_lanes:
                lines.append(f"{pad}xl_group_tails<{size}>(xl_n * xl_R, [&](int32_t xl_s) {{")
                lines += [f"{pad}{IND}{x}" for x in each] + iteration_lets(pad + IND)
                lines += self._tile_tail(s, g.sums, g.tail, depth + 1, ".of(xl_s)", "XL_LANE_STORE")
                lines.append(f"{pad}}});")
            else:
                # The tails, an iteration at a time (unrolled, so that the sums stay in registers:
                # indexed by a variable they would not), each storing from its warp's lane 0.
                lines.append(f"{pad}XL_UNROLL for (int32_t xl_s = 0; xl_s < {size}; ++xl_s) {{")
                lines.append(f"{pad}{IND}if (xl_s >= xl_n * xl_R) break;")
                lines += [f"{pad}{IND}{x}" for x in each] + iteration_lets(pad + IND)
                lines += self._tile_tail(s, g.sums, g.tail, depth + 1, "[xl_s]", "XL_ITER_STORE")
                lines.append(f"{pad}}}")
            lines.append(f"{pad}return true;")
        finally:
            self.bail, self.field_store, self.fast = saved
        return lines

    def _preludes(self, stmts, depth: int, bail: str = "return false;") -> list[str]:
        """A tile's preludes (grouping.Rows.preludes), or some of them, for one position, as an
        iteration computes them (its warp's reductions in the order of §13.2); one that fails fails
        the tile (false: it then runs an iteration at a time, where the iteration fails as it
        must), after `bail`."""
        if not stmts:
            return []
        saved, self.bail = self.bail, bail
        try:
            return [f"{IND * depth}[[maybe_unused]] XlErr err = {{0, 0, 0}};", *self.block(stmts, depth)]
        finally:
            self.bail = saved

    def _grouped_preludes(self, g, var: str, depth: int, position: str) -> list[str]:
        """A weight-once tile's preludes for each of its xl_n positions, into xl_pre_<name>[G] (in
        registers: where the tile reads them, its loops over positions are unrolled), declared
        before the loop so that a warp's next tile of the same positions (xl_prelude_t0, _n)
        reuses them: with few warps each takes many tiles of one group (in a block of 16 warps,
        the MLP's 512 rows are 8 tiles a warp). A sum over a range the same for every position
        is a tile of its own (xl_sum_tile, one row: every position's partials in one pass, then a
        butterfly each, which leaves every lane every sum); each other statement runs for the
        positions side by side. One that fails for some position fails the tile, once every
        position has run it (and nothing is kept). Preludes that read the lets the same over the
        tile's rows (attention's `row`) are kept only while the tile's first row is the same too
        (xl_prelude_r0)."""
        if not g.preludes:
            return []
        pad = IND * (depth + 1)
        cpp = {x.name: names.cpp(x.name) for x in g.preludes}
        lines = []
        per_tile = g.preludes_per_tile(var)
        tile_lets = [x for x in g.lets if x.name in g.per_tile(var)] if per_tile else []  # (read by preludes)
        varying = set(g.positions) | set(cpp) | {x.name for x in tile_lets}
        bound = [(n, position) for n in g.positions] + [(n, "xl_row0") for n in (g.rows if per_tile else ())]

        def bind(earlier, inner: str) -> list[str]:
            """Position xl_g's names: its position, the lets the same over the tile's rows (from its
            first row), earlier preludes."""
            return ([f"{inner}[[maybe_unused]] const int32_t {names.cpp(n)} = {value};" for n, value in bound]
                    + self._head_lets(tile_lets, inner)
                    + [f"{inner}[[maybe_unused]] const {cpp_ops.value_type(x.type)} {cpp[x.name]} = "
                       f"xl_pre_{cpp[x.name]}[xl_g];" for x in earlier])

        for k, x in enumerate(g.preludes):
            if (isinstance(x, ir.Reduce) and x.op == "sum"
                    and not (grouping.locals_read(x.start) | grouping.locals_read(x.stop)) & varying):
                t, checked = cpp_ops.value_type(x.value.type), self.raises(x.value) == ALWAYS
                saved, self.bail = self.bail, "return false;"
                try:
                    bounds = self._lane_bounds(x, depth + 2)
                finally:
                    self.bail = saved
                value, value_err = self._expr_and_err(x.value, x.loc.line)
                err = ", XlErr& err" if checked else ""
                lines += [f"{pad}{{", *bounds,
                          f"{pad}{IND}{'if (' if checked else ''}xl_sum_tile<{t}, 1, {g.size}{', true' if checked else ''}>"
                          f"(xl_lo, xl_hi, xl_n, xl_pre_{cpp[x.name]}, [](auto...) -> int32_t {{ return 0; }},",
                          f"{pad}{IND * 2}[&](int32_t xl_g, int32_t {names.cpp(x.var)}, int32_t{err}) -> {t} {{",
                          *bind(g.preludes[:k], pad + IND * 3),
                          f"{pad}{IND * 3}{'(void)err; ' if checked else value_err}return {value};",
                          f"{pad}{IND * 2}}},",
                          f"{pad}{IND * 2}[](auto...) -> int32_t {{ return 0; }},",
                          f"{pad}{IND * 2}[](int32_t, int32_t, int32_t, int32_t, {t} xl_a, auto...) -> {t} {{ return xl_a; }})"
                          f"{' == false) return false;' if checked else ';'}",
                          f"{pad}}}"]
            else:
                lines += [f"{pad}{{", f"{pad}{IND}bool xl_prelude_failed = false;",
                          f"{pad}{IND}XL_UNROLL for (int32_t xl_g = 0; xl_g < {g.size}; ++xl_g) {{",
                          f"{pad}{IND * 2}if (xl_g >= xl_n) continue;", *bind(g.preludes[:k], pad + IND * 2),
                          *self._preludes([x], depth + 3, "{ xl_prelude_failed = true; continue; }"),
                          f"{pad}{IND * 2}xl_pre_{cpp[x.name]}[xl_g] = {cpp[x.name]};",
                          f"{pad}{IND}}}", f"{pad}{IND}if (xl_prelude_failed) return false;", f"{pad}}}"]
        key = [("xl_prelude_t0", "xl_t0"), ("xl_prelude_n", "xl_n")] + ([("xl_prelude_r0", "xl_row0")] if per_tile else [])
        # (nothing kept while they are computed: a failure leaves some positions' values overwritten)
        return [f"{IND * depth}if ({' || '.join(f'{kept} != {now}' for kept, now in key)}) {{",
                f"{pad}xl_prelude_t0 = -1;", *lines, *[f"{pad}{kept} = {now};" for kept, now in key], f"{IND * depth}}}"]

    def _rows_body(self, s: ir.Lanes, g, depth) -> list[str]:
        """The rows path of a loop's fast path (xl_lanes_grouped): the iterations xl_t * K +
        xl_row0 + xl_ri (without a split, xl_row0 + xl_ri) for xl_rlo <= xl_ri < xl_rhi, at most
        xl_R of them. Their sums together (xl_sum_rows: the activation read once per element for
        all rows, each row's sum in the order of §13.2), then each row's tail on one lane
        (xl_rows_tails), storing on its own."""
        pad = IND * depth
        row = "xl_row0 + xl_ri"  # (a loop without a split: its iteration; xl_t is 0)
        iteration = f"xl_t * {g.k} + {row}" if g.k is not None else row

        def row_lets(inner: str) -> list[str]:
            return ([f"{inner}[[maybe_unused]] const int32_t {names.cpp(s.var)} = {iteration};"]
                    + [f"{inner}[[maybe_unused]] const int32_t {names.cpp(n)} = {row};" for n in g.rows]
                    + self._head_lets(g.lets, inner))

        lines = [f"{pad}[[maybe_unused]] constexpr XlCheck<false> xl_chk{{}};",
                 f"{pad}constexpr int xl_R = decltype(xl_rows)::value;"]
        lines += [f"{pad}[[maybe_unused]] const int32_t {names.cpp(n)} = xl_t;" for n in g.positions]
        per_tile = g.per_tile(s.var)
        if per_tile:  # the lets the same over the tile, from its first row (grouping.Rows.per_tile)
            lines += [f"{pad}[[maybe_unused]] const int32_t {names.cpp(n)} = xl_row0;" for n in g.rows]
            lines += self._head_lets([x for x in g.lets if x.name in per_tile], pad)
        saved = (self.bail, self.field_store, self.fast)
        self.fast = True
        try:
            lines += self._preludes(g.preludes, depth)
            lines += self._rows_sums(g.sums, g.per_row(s.var), depth, row_lets)
            lines.append(f"{pad}xl_rows_tails<xl_R>(xl_rlo, xl_rhi, [&](int32_t xl_ri) {{")
            lines += row_lets(pad + IND)
            lines += self._tile_tail(s, g.sums, g.tail, depth + 1, ".of(xl_ri)", "XL_LANE_STORE")
            lines += [f"{pad}}});", f"{pad}return true;"]
        finally:
            self.bail, self.field_store, self.fast = saved
        return lines

    @staticmethod
    def _sum_runs(sums) -> list[list[ir.Reduce]]:
        """A tile of rows' sums in runs over the same range, of one type (q, k and v of one input):
        each run one pass of xl_sum_rows."""
        runs: list[list[ir.Reduce]] = []
        for r in sums:
            last = runs[-1][-1] if runs else None
            if last is not None and (r.start, r.stop, r.value.type) == (last.start, last.stop, last.value.type):
                runs[-1].append(r)
            else:
                runs.append([r])
        return runs

    def _rows_sums(self, sums, moving: set[str], depth: int, row_lets) -> list[str]:
        """A tile of rows' sums, sum k into `xl_sums<k>`, each run over one range in one pass
        (xl_sum_rows: S sums of each row): the parts of their elements the same for every row
        (grouping.invariant_parts, reading no `moving` name: the activation, an attention weight, a
        pool's page) computed once per element for all of them, as `xl_w` (several: a struct,
        `xl_w.p0` ...; parts alike in several sums, once), each sum's element then reading its own
        by name. A run whose elements may fail: `if (xl_sum_rows<...>(...) == false) return false;`
        (the tile then runs as the checked loop does: xl_lanes_grouped)."""
        pad, inner = IND * depth, IND * (depth + 1)
        lines, first = [], 0
        for run in self._sum_runs(sums):
            t = cpp_ops.value_type(run[0].value.type)
            accs = [f"xl_sums{first + m}" for m in range(len(run))]
            first += len(run)
            checks = [self.raises(r.value) == ALWAYS for r in run]
            checked = any(checks)
            parts, found = [], {}  # the run's parts (each once); a part's key -> its C++ name
            for r, c in zip(run, checks):
                # (a part that may fail only where the element may: else its checks would go unseen)
                for x in grouping.invariant_parts(r.value, moving):
                    if c or self.raises(x) != ALWAYS:
                        same = next((k for k, y in enumerate(parts) if _same_part(x, y)), None)
                        if same is None:
                            parts.append(x)
                            same = len(parts) - 1
                        found[self._part_key(x)] = same
            variables = "".join(f"[[maybe_unused]] const int32_t {v} = xl_j; "
                                for v in dict.fromkeys(names.cpp(r.var) for r in run))
            err = ", XlErr& err" if checked else ""
            codes, pre_err = self._parts_code(parts, run[0].loc.line)
            body = f"{variables}{'(void)err; ' if checked else pre_err}"
            part_type, shared, refs = _parts_lambda("xl_w", parts, codes, f"int32_t xl_j{err}", body)
            names_of = {key: refs[k] for key, k in found.items()}
            self.hoisted.update(names_of)
            try:
                values = [self._expr_and_err(r.value, r.loc.line) for r in run]
            finally:
                for key in names_of:
                    self.hoisted.pop(key, None)
            elements = [[f"[[maybe_unused]] const int32_t {names.cpp(r.var)} = xl_j;",
                         f"{'(void)err; ' if checked and c else value_err}return {value};"]
                        for r, c, (value, value_err) in zip(run, checks, values)]
            lines += [f"{pad}XlRowSum<{t}, xl_R> {acc};" for acc in accs]
            lines += [f"{pad}{{", *self._lane_bounds(run[0], depth + 1),
                      f"{inner}XlRowSum<{t}, xl_R>* const xl_out[] = {{{', '.join('&' + a for a in accs)}}};",
                      f"{inner}{'if (' if checked else ''}xl_sum_rows<{t}, xl_R, {str(checked).lower()}, {len(run)}>"
                      f"(xl_lo, xl_hi, xl_rlo, xl_rhi, xl_out,",
                      f"{inner}{IND}{shared}",
                      f"{inner}[&]([[maybe_unused]] int32_t xl_k, int32_t xl_ri, int32_t xl_j, [[maybe_unused]] "
                      f"{part_type} xl_w{err}) -> {t} {{", *row_lets(inner + IND)]
            if len(run) == 1:
                lines += [inner + IND + x for x in elements[0]]
            else:  # (xl_k a constant where xl_sum_rows calls it: its loop over the sums unrolled)
                lines.append(f"{inner}{IND}switch (xl_k) {{")
                for k, element in enumerate(elements):
                    label = "default" if k == len(elements) - 1 else f"case {k}"
                    lines += [f"{inner}{IND}{label}: {{", *(inner + IND * 2 + x for x in element), f"{inner}{IND}}}"]
                lines.append(f"{inner}{IND}}}")
            lines += [f"{inner}}}){' == false) return false;' if checked else ';'}", f"{pad}}}"]
        return lines

    def stmt_Reduce(self, s: ir.Reduce, depth):
        return self._reductions([s], depth)

    def _reductions(self, run: list[ir.Reduce], depth):
        """One reduction (xl_reduce_sum, xl_reduce_best), or a run of them over one range taken
        in one pass (ir.reduction_runs: an accumulator each, XlSumPass / XlBestPass, so what their
        elements share is read once); the results, and their failures, in program order."""
        pad, inner = IND * depth, IND * (depth + 1)
        reads, uses = self._reads_ahead(run)
        one = len(run) == 1 and not reads
        lines = [f"{pad}[[maybe_unused]] {cpp_ops.value_type(s.type)} {names.cpp(s.name)} = {{}};" for s in run]
        lines += [f"{pad}{{", *self._lane_bounds(run[0], depth + 1)]
        self.hoisted.update(uses)
        try:
            parts = [self._reduce_element(s, depth + 1 if one else depth + 2) for s in run]
        finally:
            for key in uses:
                del self.hoisted[key]
        if not one:
            for k, (s, (_, _, t_args)) in enumerate(zip(run, parts)):
                lines.append(f"{inner}XlSumPass<{t_args}> xl_p{k};" if s.op == "sum"
                             else f"{inner}XlBestPass<{t_args}> xl_p{k}({_greatest(s)});")
            lines.append(f"{inner}xl_reduce_pass(xl_lo, xl_hi, [&](int64_t xl_j, int32_t xl_l) {{")
            if reads:
                lines.append(f"{inner}{IND}[[maybe_unused]] const int32_t xl_k = (int32_t)xl_j;")
                lines += [f"{inner}{IND}const auto {name} = {code};" for name, code in reads]
            for k, (elem, _, _) in enumerate(parts):
                lines += [f"{inner}{IND}xl_p{k}.add(xl_j, xl_l, {elem[0]}", *elem[1:-1], elem[-1] + ");"]
            lines.append(f"{inner}}});")
        for k, (s, (elem, level, t_args)) in enumerate(zip(run, parts)):
            name, t, at = names.cpp(s.name), cpp_ops.value_type(s.value.type), "" if one else str(k)
            if s.op == "sum":
                if one:
                    lines.append(f"{inner}{name} = xl_reduce_sum<{t_args}>(err, 1, xl_lo, xl_hi, {elem[0]}")
                    lines += elem[1:-1] + [elem[-1] + ");"]
                else:
                    lines.append(f"{inner}{name} = xl_p{k}.finish(err, 1);")
            else:
                lines.append(f"{inner}{t} xl_best{at};")
                if one:
                    lines.append(f"{inner}const int64_t xl_at = xl_reduce_best<{t_args}>(err, 1, xl_lo, xl_hi, "
                                 f"{_greatest(s)}, &xl_best, {elem[0]}")
                    lines += elem[1:-1] + [elem[-1] + ");"]
                else:
                    lines.append(f"{inner}const int64_t xl_at{at} = xl_p{k}.finish(err, 1, &xl_best{at});")
                result = (f"xl_best_index(xl_at{at})" if s.op.startswith("arg")
                          else f"xl_best_value(xl_best{at}, xl_at{at}, {_greatest(s)})")
                lines.append(f"{inner}{name} = {result};")
            lines += self._bail_if(level, inner)  # (the bounds bailed out before)
            if not one:
                lines += self._line_mark(s, depth + 1)
        lines.append(f"{pad}}}")
        return lines + (self._line_mark(run[0], depth) if one else [])

    def _reads_ahead(self, run: list[ir.Reduce]) -> tuple[list[tuple[str, str]], dict]:
        """The shared-state reads of a per-request stage's reductions, each distinct one read once
        per element before the elements' conditions (their loads in flight together, where each
        read behind its element's `&&` waited for the one before: a page table's counts, a dozen L2
        round trips one after another). Nothing writes shared state while a per-request stage's
        element is evaluated, so the value is the one the program reads. Read ahead, an index is
        evaluated where the program may not evaluate it, so only an index that cannot fail for any
        value (_safe_index) and every array read in it guarded (xl_peek: out of range reads
        nothing); the use still evaluates its index where the program does (expr_Load). Only where
        the run's elements make two or more such reads: the reads ahead (name, C++), and the uses
        (hoisted's keys -> names)."""
        if self.in_collective:
            return [], {}
        found = [(s, x) for s in run for x in ranges.subexpressions(s.value)
                 if isinstance(x, ir.Load) and x.base.kind == ir.SHARED and _safe_index(x.index)]
        if len(found) < 2:
            return [], {}
        reads: dict[str, str] = {}  # the read's C++, the element's variable as xl_k -> its name
        uses = {}
        for s, load in found:
            uses[("read", id(load))] = reads.setdefault(self._guarded(load, s.var), f"xl_read{len(reads)}")
        return [(name, code) for code, name in reads.items()], uses

    def _guarded(self, load: ir.Load, var: str) -> str:
        """C++ of `load` and the array reads in its index, each through xl_peek; `var` as xl_k."""
        inner = [x for x in ranges.subexpressions(load.index) if isinstance(x, (ir.Var, ir.Load))]
        codes = {id(v): "xl_k" for v in inner if isinstance(v, ir.Var) and v.kind == ir.LOCAL and v.name == var}
        saved = dict(self.hoisted)
        try:
            self.hoisted.update(codes)
            for x in reversed(inner):  # (an index's reads before the read they index)
                if isinstance(x, ir.Load):
                    self.hoisted[id(x)] = f"xl_peek({self.expr(x.base)}, {self.expr(x.index)})"
            return f"xl_peek({self.expr(load.base)}, {self.expr(load.index)})"
        finally:
            self.hoisted = saved

    def _reduce_element(self, s: ir.Reduce, depth):
        """A reduction's element as a lambda of its variable (its first line to follow a call's
        opening, its body one level deeper than `depth`, its brace at `depth`), the level at which
        its elements may fail, and the accumulation's template arguments for that level."""
        t = cpp_ops.value_type(s.value.type)

        def element():
            self.bail = f"return {t}();"
            value = self.statement_expr(s.value, s.loc.line)
            return [f"[&](int32_t {names.cpp(s.var)}, XlErr& err) -> {t} {{",
                    f"{IND * (depth + 1)}(void)err;",
                    f"{IND * (depth + 1)}return {value};",
                    f"{IND * depth}}}"]

        elem = self._lane_body(element)
        # Elements that cannot fail: no error test per element (on the fast path, or always).
        level = self.raises(s.value)
        return elem, level, {NEVER: f"{t}, false", CHECKED_COPY: f"{t}, XL_CHECKS(xl_chk)", ALWAYS: t}[level]

    def stmt_Break(self, s, depth):
        return [IND * depth + "break;"]

    def stmt_Continue(self, s, depth):
        return [IND * depth + "continue;"]

    def stmt_Return(self, s: ir.Return, depth):
        pad = IND * depth
        value = self.statement_expr(s.value, s.loc.line)
        level = self.raises(s.value)
        if not level:
            return [f"{pad}return {value};"]
        t = cpp_ops.value_type(s.value.type)
        return [f"{pad}{{", f"{pad}{IND}const {t} xl_v = {value};", *self._bail_if(level, pad + IND),
                f"{pad}{IND}return xl_v;", f"{pad}}}"]

    def stmt_ExprStmt(self, s: ir.ExprStmt, depth):
        pad = IND * depth
        return [f"{pad}(void){self.statement_expr(s.expr, s.loc.line)};", f"{pad}if (xl_failed(err)) {self.bail}"]

    # ---- declarations --------------------------------------------------------------

    def function(self, f: ir.Function) -> dict:
        ret = cpp_ops.value_type(f.ret)
        self.conds = 0
        self.uses_err = False
        self.bail = f"return xl_raise<{ret}>(xl_caller, xl_key, err);"
        self.proofs = ranges.analyse(f.body)
        params = ["XlErr& xl_caller", "int32_t xl_key", "const Params& p"]
        for a in f.params:
            if isinstance(a.type, ir.ArrayType):
                params.append(f"const {cpp_ops.storage_type(a.type.elem)} (&{names.cpp(a.name)})[{a.type.length}]")
            else:
                params.append(f"{cpp_ops.value_type(a.type)} {names.cpp(a.name)}")
        self.in_function = f.name
        try:
            body = self.block(f.body, 1)
        finally:
            self.in_function = None
        return {"name": f.name, "ret": ret, "params": ", ".join(params), "loc": _loc_text(f.loc), "body": body,
                "uses_err": self.uses_err}

    def stage(self, s: ir.Stage, trace: ir.Trace | None) -> dict:
        self.bail = "return err;"
        self.field_store = None if s.in_phase2 else "XL_WARP_STORE"
        self.stage_name = s.name
        self.conds = 0
        guard = None
        if s.guard is not None:
            self.proofs = ranges.analyse_expr(s.guard)
            guard = self.statement_expr(s.guard, s.guard.loc.line)
        self.proofs = ranges.analyse(s.body)
        # A cluster team records what its code touches (XL_TOUCH) only in a stage with a loop it may
        # spread: only such a loop reads the record, and every stage starts from "anything".
        self.team_touches = not s.in_phase2 and any(
            isinstance(x, ir.Lanes) and (x.by_warp or _may_write_pool(x.body)) for x in ir.statements(s.body))
        collective = self.collective_stage(s) if s.is_collective else None
        body = self.block(s.body, 1) if not s.is_collective else []
        if not s.in_phase2:  # -DXL_PROFILE_LINES: the stage's time from its start to its end
            # (a cluster team's record: what ran before the stage, unknown here, touched anything)
            start = [f"{IND}XL_TOUCH({ALL_STATE});"] if self.team_touches else []
            body = [f"{IND}XL_LINE_START();", *start] + body + self._line_mark(s, 1, " (the stage's end)")
        self.field_store = None
        return {
            "name": s.name,
            "index": s.index,
            "line": s.loc.line,
            "arbiter": s.is_arbiter,
            "phase2": s.in_phase2,
            "collective": collective,
            "loc": _loc_text(s.loc),
            "guard": guard or "true",
            "body": body,
            "trace": self.trace(trace) if trace else None,
        }

    def trace(self, t: ir.Trace) -> dict:
        lines = []
        offset = 0
        for name in t.fields:
            f = self.program.field(name)
            elem = f.type.elem if isinstance(f.type, ir.ArrayType) else f.type
            word = "xl_f32_bits({})" if elem == ir.F32 else "(uint32_t)({})"
            access = f"r.{names.cpp(name)}"
            if isinstance(f.type, ir.ArrayType):
                lines.append(f"for (int i = 0; i < {f.type.length}; ++i) w[{offset} + i] = {word.format(access + '[i]')};")
                offset += f.type.length
            else:
                lines.append(f"w[{offset}] = {word.format(access)};")
                offset += 1
        return {"index": t.index, "words": offset, "lines": lines}

    def context(self) -> dict:
        p = self.program
        traced = {t.stage: t for t in p.traces}
        self.bail = "return false;"
        self.proofs = ranges.analyse_expr(p.done)
        done = self.statement_expr(p.done, p.done.loc.line)
        widths = [ERROR_WORDS] + [self.trace(t)["words"] for t in p.traces]
        return {
            "program": p,
            "namespace": names.cpp(p.name),
            "consts": [(cpp_ops.value_type(c.type), names.cpp(n), cpp_ops.literal(c.value, c.type))
                       for n, c in p.consts.items()],
            "enums": [
                {"name": names.cpp(t.name), "ctype": cpp_ops.value_type(t), "is_flags": t.is_flags,
                 "members": [(names.cpp(m), cpp_ops.literal((1 << i) if t.is_flags else i, t))
                             for i, m in enumerate(t.members)]}
                for t in p.enums
            ],
            "params": [(cpp_ops.storage_type(x.type), names.cpp(x.name)) for x in p.params],
            "tensors": [(names.cpp(t.name), ", ".join(str(d) for d in t.dims)) for t in p.tensors],
            "pools": [(cpp_ops.storage_type(x.elem), names.cpp(x.name), ", ".join(str(d) for d in x.dims), x.owner)
                      for x in p.pools],
            "request_fields": self.struct_fields(p.request_fields),
            "shared_fields": self.struct_fields(p.shared_fields),
            "request_words": sum(s.count for s in slots(p.request_fields)),
            "shared_words": sum(s.count for s in slots(p.shared_fields)),
            "functions": [self.function(f) for f in p.functions],
            "stages": [self.stage(s, traced.get(s.name)) for s in p.stages],
            "phase2_conditions": self.phase2_conditions(),
            "arbiter_conditions": [(s.index, self.local_condition(s.guard)) for s in p.arbiter_stages],
            "frame_words": collective_frame_words(p),
            "done": done,
            "done_reads_shared": ir.may_read_shared(p.done),
            "phase2_spans": field_spans(p.request_fields, ir.fields_written(p.phase2_stages)),
            "record_words": 4 + max(widths),  # the header: request, round, kind, stage
        }

    def local_condition(self, guard: ir.Expr | None) -> str | None:
        """A guard's local part (ir.local_condition) in C++; None: there is none."""
        cond = ir.local_condition(guard)
        if cond is None:
            return None
        self.proofs = ranges.analyse_expr(cond)
        return self.statement_expr(cond, cond.loc.line)

    def phase2_conditions(self) -> list[str | None]:
        """For arbiter_may_run: each phase-2 guard's local part, up to the first guard
        without one (None: that stage may always run)."""
        out = []
        for s in self.program.phase2_stages:
            out.append(self.local_condition(s.guard))
            if out[-1] is None:
                break
        return out

    def struct_fields(self, fields) -> list[dict]:
        out = []
        for s in slots(fields):
            elem = s.type.elem if isinstance(s.type, ir.ArrayType) else s.type
            out.append({"ctype": cpp_ops.storage_type(elem), "name": names.cpp(s.name),
                        "array": f"[{s.count}]" if s.is_array else "", "offset": s.offset * 4, "xl_name": s.name})
        return out


# Fields this few words apart are copied as one span (a word copied for nothing costs less
# than another pass over the team's threads).
SPAN_GAP = 64


def field_spans(fields, names: set[str]) -> list[dict]:
    """The words [lo, hi) of the fields named, as few spans as SPAN_GAP allows, each with the names
    of the fields it holds that are named."""
    spans: list[dict] = []
    for s in slots(fields):
        if s.name not in names:
            continue
        if spans and s.offset - spans[-1]["hi"] <= SPAN_GAP:
            spans[-1]["hi"] = s.offset + s.count
            spans[-1]["names"].append(s.name)
        else:
            spans.append({"lo": s.offset, "hi": s.offset + s.count, "names": [s.name]})
    for span in spans:
        held = span.pop("names")
        span["fields"] = held[0] if len(held) == 1 else f"{held[0]} .. {held[-1]} ({len(held)} fields)"
    return spans


def _parts_lambda(name: str, parts, codes: list[str], taken: str, body: str) -> tuple[str, str, list[str]]:
    """A tile's shared parts as one lambda taking `taken` (after `body`): their C++ type, the
    lambda, and each part's name in the element -- one: `name`; several: a struct of them, evaluated
    left to right (`name.p0` ...); none: a lambda returning 0."""
    if len(parts) == 1:
        t = cpp_ops.value_type(parts[0].type)
        return t, f"[&]({taken}) -> {t} {{ {body}return {codes[0]}; }},", [name]
    if parts:
        fields = " ".join(f"{cpp_ops.value_type(x.type)} p{k};" for k, x in enumerate(parts))
        return ("auto", f"[&]({taken}) {{ {body}struct XlParts {{ {fields} }}; return XlParts{{{', '.join(codes)}}}; }},",
                [f"{name}.p{k}" for k in range(len(parts))])
    return "int32_t", "[](auto...) -> int32_t { return 0; },", []


def _same_part(x, y) -> bool:
    """Whether two shared parts of a tile's elements compute the same (IR nodes compare by value)."""
    if isinstance(x, grouping.PoolPage) or isinstance(y, grouping.PoolPage):
        return isinstance(x, grouping.PoolPage) and isinstance(y, grouping.PoolPage) and x.load == y.load
    return x == y


def _rows_hint(s: ir.Lanes, bound: int | None) -> int:
    """How many iterations a loop without a split has at most, for its rows per tile: its
    fast path's bound, else its constant range's length, else 0 (unknown: the most rows)."""
    if bound is not None:
        return bound
    if isinstance(s.start, ir.Const) and isinstance(s.stop, ir.Const):
        return max(int(s.stop.value) - int(s.start.value), 0)
    return 0


# A cluster team's record of the state its code touched since the cluster's last barrier
# (xl_team_loop): a bit per request field (a hash of its name, 31 buckets) and one for every pool.
ALL_STATE = "0xffffffffu"
POOLS_BIT = 31


def state_mask(names_: set[str]) -> str:
    """The bits of fields and pools (ir.state_access's names), as a C++ constant."""
    bits = 0
    for name in names_:
        bits |= 1 << (POOLS_BIT if name.startswith("pool ") else zlib.crc32(name.encode()) % POOLS_BIT)
    return f"0x{bits:08x}u"


def _always_evaluated(e: ir.Expr):
    """The parts of `e` evaluated whenever it is: not a branch of `?:`, nor the right of `&&`, `||`."""
    yield e
    if isinstance(e, ir.Select):
        yield from _always_evaluated(e.cond)
    elif isinstance(e, ir.Binary) and e.op in ("&&", "||"):
        yield from _always_evaluated(e.left)
    else:
        for c in ranges.children(e):
            yield from _always_evaluated(c)


def _may_write_pool(body) -> bool:
    """Whether statements may write a pool: a pool store, or a call of a helper (whose body is not
    looked into: conservatively yes)."""
    return any(name.startswith("pool ") for name in ir.state_access(body)[1])


def _reads_state(e) -> bool:
    """Whether an expression reads request or shared state (or may, through a call)."""
    if isinstance(e, ir.Var):
        return e.kind in (ir.FIELD, ir.SHARED)
    if isinstance(e, (ir.Load, ir.PoolLoad, ir.Call)):
        return True
    return any(_reads_state(c) for c in ranges.children(e))


def _strip_parens(code: str) -> str:
    """`((a < b))` reads badly inside `if (...)`: drop one redundant outer pair."""
    if code.startswith("(") and code.endswith(")"):
        depth = 0
        for i, ch in enumerate(code):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0 and i < len(code) - 1:
                return code
        return code[1:-1]
    return code


def _loc_text(loc) -> str:
    return f"{loc.file}:{loc.line}"


