"""Declarations: constants, params, types, fields, tensors, pools, builtins,
functions, stages, traces and `done when`; the call graph and unused names."""

from __future__ import annotations
from .. import ast as A
from ...core import ir
from ...core.diagnostics import Loc, did_you_mean
from ...core.ir import BOOL, F32, I32
from .rules import COLLECTIVE_TYPES, Context, Global, Local, MAX_CALL_DEPTH, MAX_DIMENSIONS, MAX_POOL_TOTAL_ELEMENTS, MAX_TENSOR_ELEMENTS, POOL_ELEMENTS, PRELUDE_NAME, _always_returns, _mentions_params, _names_in, _not_constant, _reserved
from .procs import names_used


class DeclarationRules:
    """The Checker's rules for declarations (a mixin of Checker, program.py)."""

    def _declare(self, items) -> None:
        def add(name: str, kind: str, loc: Loc, node=None) -> None:
            why = _reserved(name)
            if why is None and name in COLLECTIVE_TYPES and kind in ("function", "builtin"):  # calls mean the collective
                why = f"'{name}' is a collective operation; a function cannot have its name"
            if why is not None:
                self.error(loc, why)
                self.rejected.add(name)
                return
            prev = self.globals.get(name)
            if prev is not None:
                self.error(loc, f"'{name}' is already defined (as a {prev.kind} at {prev.loc})")
                return
            self.globals[name] = Global(kind, loc, node)

        for item in items:
            if isinstance(item, A.Const):
                add(item.name, "const", item.loc, item)
            elif isinstance(item, A.Param):
                add(item.name, "param", item.loc, item)
            elif isinstance(item, A.EnumDecl):
                add(item.name, "flags" if item.is_flags else "enum", item.loc, item)
            elif isinstance(item, A.StateBlock):
                for f in item.fields:
                    add(f.name, "request field" if item.kind == "request" else "shared field", f.loc, f)
            elif isinstance(item, A.BuiltinDecl):
                add(item.name, "builtin", item.loc, item)
            elif isinstance(item, A.TensorDecl):
                add(item.name, "tensor", item.loc, item)
            elif isinstance(item, A.PoolDecl):
                add(item.name, "pool", item.loc, item)
            elif isinstance(item, A.FnDecl):
                add(item.name, "function", item.loc, item)
            elif isinstance(item, A.ProcDecl):
                add(item.name, "proc", item.loc, item)
            elif isinstance(item, A.StageDecl):
                add(item.name, "stage", item.loc, item)

    def _enum(self, node: A.EnumDecl) -> None:
        names = []
        for m in node.members:
            if m.name in names:
                self.error(m.loc, f"duplicate member '{m.name}' in {node.name}")
                continue
            why = _reserved(m.name)
            if why is not None:
                self.error(m.loc, why)
                continue
            if m.name in self.globals and self.globals[m.name].kind != "member":
                g = self.globals[m.name]
                self.error(m.loc, f"member '{m.name}' clashes with the {g.kind} defined at {g.loc}")
                continue
            names.append(m.name)
        if node.is_flags and len(names) > 32:
            self.error(node.loc, f"flag set {node.name} has {len(names)} members; at most 32 fit in a u32")
        if not node.members:  # (the grammar needs one; members rejected above are reported already)
            self.error(node.loc, f"{'flag set' if node.is_flags else 'enum'} {node.name} has no members")
        t = ir.EnumType(node.name, tuple(names), node.is_flags)
        if node.name in self.globals and self.globals[node.name].node is node:
            self.types[node.name] = t
        for i, name in enumerate(names):
            self.members.setdefault(name, []).append((t, i))

    def _resolve_type(self, ref: A.TypeRef, allow_open: bool = False, allow_array: bool = True):
        base = self.types.get(ref.name)
        if base is None:
            candidates = list(self.types)
            self.error(ref.loc, f"unknown type '{ref.name}'{did_you_mean(ref.name, candidates)}")
            return None
        if ref.open_array:
            if not allow_open:
                self.error(ref.loc, "arrays of unspecified length ('T[]') are only allowed as builtin parameters")
                return None
            return ir.ArrayType(base, None)
        if ref.length is None:
            return base
        if not allow_array:
            self.error(ref.loc, "an array type is not allowed here (only fields and function parameters are arrays)")
            return None
        n = self._const_int(ref.length, "array length")
        if n is None:
            return None
        if n <= 0:
            self.error(ref.length.loc, f"array length must be positive, not {n}")
            return None
        if n > 1 << 16:
            self.error(ref.length.loc, f"array length {n} is larger than the limit of 65536")
            return None
        return ir.ArrayType(base, n)

    def _const_int(self, node: A.Node, what: str) -> int | None:
        e = self.expr(node, Context("const"), I32)
        if e is None:
            return None
        if not isinstance(e, ir.Const):
            self.error(node.loc, _not_constant(e, f"{what}"))
            return None
        if not ir.is_int(e.type):
            self.error(node.loc, f"{what} must be an integer, not {e.type}")
            return None
        return int(e.value)

    def _const(self, node: A.Const) -> None:
        t = self._resolve_type(node.type, allow_array=False)
        e = self.expr(node.value, Context("const"), t)
        if t is None or e is None:
            return
        if not isinstance(e, ir.Const):
            self.error(node.value.loc, _not_constant(e, f"the value of const '{node.name}'"))
            return
        if not self._same(t, e.type, node.value.loc, f"const '{node.name}'"):
            return
        if self.globals.get(node.name, Global("", node.loc)).node is node:  # not a duplicate
            self.consts[node.name] = ir.Const(e.value, t, node.loc, node.name)

    def _constants_in_order(self, items) -> list:
        """Consts and params, each after the consts its value uses (a const may be used before
        the line that declares it). A cycle is an error; its consts are left undefined."""
        decls = [i for i in items if isinstance(i, (A.Const, A.Param))]
        consts = {i.name: i for i in decls if isinstance(i, A.Const) and self.globals.get(i.name)
                  and self.globals[i.name].node is i}
        order, state = [], {}
        for root in decls:
            if state.get(id(root)):
                continue
            stack = [(root, iter(sorted(_names_in(root.value) & set(consts))))]
            state[id(root)] = "active"
            path = [root]
            while stack:
                node, deps = stack[-1]
                dep = next(deps, None)
                if dep is None:
                    stack.pop()
                    path.pop()
                    state[id(node)] = "done"
                    order.append(node)
                    continue
                target = consts[dep]
                if state.get(id(target)) == "active":
                    cycle = [n.name for n in path[path.index(target):]] + [dep]
                    self.error(target.loc, f"const '{dep}' is defined in terms of itself: {' -> '.join(cycle)}")
                    for n in path[path.index(target):]:
                        state[id(n)] = "cyclic"
                    continue
                if state.get(id(target)):
                    continue
                state[id(target)] = "active"
                path.append(target)
                stack.append((target, iter(sorted(_names_in(target.value) & set(consts)))))
        return [n for n in order if state.get(id(n)) != "cyclic"]

    def _param(self, node: A.Param) -> None:
        t = self._resolve_type(node.type, allow_array=False)
        e = self.expr(node.value, Context("const"), t)
        if t is None or e is None:
            return
        if not isinstance(e, ir.Const):
            self.error(node.value.loc, _not_constant(e, f"the default of param '{node.name}'"))
            return
        registered = self.globals.get(node.name, Global("", node.loc)).node is node  # not a duplicate
        if self._same(t, e.type, node.value.loc, f"param '{node.name}'") and registered:
            self.params[node.name] = ir.ParamDecl(node.name, t, e.value, node.loc)

    def _field(self, node: A.Field, kind: str) -> None:
        if self.globals.get(node.name, Global("", node.loc)).node is not node:
            return  # a duplicate, already reported
        t = self._resolve_type(node.type)
        if t is None:
            return
        init = None
        if node.init is not None:
            elem = t.elem if isinstance(t, ir.ArrayType) else t
            init = self.expr(node.init, Context("init"), elem)
            if init is None:
                return
            self._same(elem, init.type, node.init.loc, f"the initial value of '{node.name}'")
            if not isinstance(init, ir.Const) and not _mentions_params(init):
                # Folding left it alone, so evaluating it fails: say why now, not at launch.
                self.error(node.init.loc, _not_constant(init, f"the initial value of '{node.name}'"))
                return
        decl = ir.FieldDecl(node.name, t, init, node.loc)
        (self.fields if kind == "request" else self.shared)[node.name] = decl

    def _dims(self, exprs, what: str, name: str = "") -> list[int] | None:
        """A tensor's or pool's constant dimensions, each positive, at most MAX_DIMENSIONS of them;
        None after an error."""
        if len(exprs) > MAX_DIMENSIONS:
            kind = what.split()[1]  # "a tensor dimension" -> tensor
            self.error(exprs[MAX_DIMENSIONS].loc, f"{kind} '{name}' has {len(exprs)} dimensions; the limit is "
                                                  f"{MAX_DIMENSIONS} (numpy's, which the simulator uses): merge some "
                                                  "of them")
            return None
        dims = [self._const_int(d, what) for d in exprs]
        if any(d is None for d in dims):
            return None
        for d, ref in zip(dims, exprs):
            if d <= 0:
                self.error(ref.loc, f"{what} must be positive, not {d}")
                return None
        return dims

    def _tensor(self, node: A.TensorDecl) -> None:
        if self.globals.get(node.name, Global("", node.loc)).node is not node:
            return  # a duplicate, already reported
        if node.elem != "f32":
            self.error(node.loc, f"tensor '{node.name}' holds {node.elem}; tensors hold f32")
            return
        dims = self._dims(node.dims, "a tensor dimension", node.name)
        if dims is None:
            return
        t = ir.Tensor(node.name, F32, tuple(dims), node.loc)
        if t.size > MAX_TENSOR_ELEMENTS:
            self.error(node.loc, f"tensor '{node.name}' has {t.size} elements; the limit is {MAX_TENSOR_ELEMENTS}")
            return
        self.tensors[node.name] = t

    def _pool(self, node: A.PoolDecl) -> None:
        if self.globals.get(node.name, Global("", node.loc)).node is not node:
            return  # a duplicate, already reported
        elem = ir.SCALARS.get(node.elem)
        if elem not in POOL_ELEMENTS:
            self.error(node.loc, f"pool '{node.name}' holds {node.elem}; pools hold i32, u32 or f32")
            return
        dims = self._dims(node.dims, "a pool dimension", node.name)
        if dims is None:
            return
        pool = ir.Pool(node.name, elem, tuple(dims), node.owner.name, node.loc)
        if pool.size > MAX_TENSOR_ELEMENTS:
            self.error(node.loc, f"pool '{node.name}' has {pool.size} elements; the limit is {MAX_TENSOR_ELEMENTS}")
            return
        total = sum(p.size for p in self.pools.values()) + pool.size
        if total > MAX_POOL_TOTAL_ELEMENTS:
            if getattr(self, "_pools_over", False):
                return  # reported at the first pool past the limit
            self._pools_over = True
            self.error(node.loc, f"pool '{node.name}' brings the pools to {total} elements in all; the limit is "
                                 f"{MAX_POOL_TOTAL_ELEMENTS} ({MAX_POOL_TOTAL_ELEMENTS * 4 >> 30} GiB, allocated at "
                                 "once by every backend): make the pools smaller")
            return
        if not self._pool_owner(node, dims[0]):
            return
        self.pools[node.name] = pool

    def _pool_owner(self, node: A.PoolDecl, pages: int) -> bool:
        """The owner is a shared i32 array with an element per page: OWNER[p] is the id of the
        request page p belongs to; phase 2 (arbiters, collective stages) changes it."""
        owner = node.owner
        g = self.globals.get(owner.name)
        if g is None:
            if owner.name not in self.rejected:
                shared = [n for n, x in self.globals.items() if x.kind == "shared field"]
                self.error(owner.loc, f"unknown owner '{owner.name}' of pool '{node.name}'{did_you_mean(owner.name, shared)}")
            return False
        f = self.shared.get(owner.name)
        want = f"a shared i32 array with an element per page (i32[{pages}] or longer)"
        if g.kind != "shared field":
            self.error(owner.loc, f"the owner of pool '{node.name}' must be {want}; '{owner.name}' is a {g.kind}")
            return False
        if f is None:  # its declaration was rejected, with an error
            return False
        if not (isinstance(f.type, ir.ArrayType) and f.type.elem == I32):
            self.error(owner.loc, f"the owner of pool '{node.name}' must be {want}; '{owner.name}' is {f.type}")
            return False
        if f.type.length < pages:
            self.error(owner.loc, f"owner '{owner.name}' has {f.type.length} elements, but pool '{node.name}' has "
                                  f"{pages} pages (its first dimension): give the owner an element per page")
            return False
        self.used_globals.add(owner.name)
        return True

    def _params(self, params, allow_open: bool):
        out = []
        seen = set()
        for p in params:
            if p.name in seen:
                self.error(p.loc, f"duplicate parameter '{p.name}'")
            seen.add(p.name)
            t = self._resolve_type(p.type, allow_open=allow_open)
            out.append(ir.FnParam(p.name, t))
        return tuple(out)

    def _builtin(self, node: A.BuiltinDecl) -> None:
        if node.loc.file != PRELUDE_NAME:
            # Every backend implements each builtin (runtime/builtins.py, xl_runtime.cuh); a
            # declaration elsewhere would check, then fail when the generated code runs.
            self.error(node.loc, f"builtin '{node.name}' is not in the prelude; builtins are declared in "
                                 "xlgen/runtime/prelude.xl and implemented by every backend")
        params = self._params(node.params, allow_open=True)
        ret = self._resolve_type(node.ret, allow_array=False) if node.ret else None
        self.builtins[node.name] = ir.Builtin(node.name, params, ret, node.warp, node.loc)

    def _fn_signature(self, node: A.FnDecl) -> None:
        params = self._params(node.params, allow_open=False)
        ret = self._resolve_type(node.ret, allow_array=False)
        self.fn_sigs[node.name] = (params, ret)

    def _function(self, node: A.FnDecl) -> ir.Function:
        params, ret = self.fn_sigs[node.name]
        ctx = Context("fn", ret=ret)
        scope = {}
        for p, a in zip(params, node.params):
            scope[p.name] = Local(p.type, a.loc, mutable=False, used=True)  # type None: already reported
            self._check_local_name(p.name, a.loc)
        ctx.scopes.append(scope)
        body = self.block(node.body, ctx)
        self._pop_scope(ctx)
        if ret is not None and not _always_returns(node.body):
            self.error(node.loc, f"function '{node.name}' may end without returning a value")
        self.call_graph[node.name] = ctx.callees
        return ir.Function(node.name, params, ret, body, node.loc)

    def _stage(self, node: A.StageDecl, index: int) -> ir.Stage:
        guard = None
        if node.guard is not None:
            guard = self.expr(node.guard, Context("guard"), BOOL)
            if guard is not None and guard.type != BOOL:
                self.error(node.guard.loc, f"a stage guard must be bool, not {guard.type}")
        ctx = Context(node.kind)
        ctx.taken = names_used(node.body)
        ctx.scopes.append({})
        body = self.block(node.body, ctx)
        self._pop_scope(ctx)
        self.call_graph[f"stage {node.name}"] = ctx.callees
        return ir.Stage(node.name, node.kind, guard, body, index, node.loc)

    def _traces(self, nodes: list[A.TraceDecl], stages: list[ir.Stage]) -> list[ir.Trace]:
        out = []
        seen: dict[str, Loc] = {}
        stage_names = [s.name for s in stages]
        for node in nodes:
            if node.stage not in stage_names:
                self.error(node.loc, f"trace of unknown stage '{node.stage}'{did_you_mean(node.stage, stage_names)}")
                continue
            if node.stage in seen:
                self.error(node.loc, f"stage '{node.stage}' is already traced (at {seen[node.stage]})")
                continue
            seen[node.stage] = node.loc
            names = []
            for ident in node.fields:
                if ident.name not in self.fields:
                    hint = did_you_mean(ident.name, self.fields)
                    self.error(ident.loc, f"'{ident.name}' is not a request field{hint}")
                elif ident.name in names:
                    self.error(ident.loc, f"field '{ident.name}' is listed twice")
                else:
                    names.append(ident.name)
                    self.used_globals.add(ident.name)
            out.append(ir.Trace(node.stage, tuple(names), len(out), node.loc))
        return out

    def _header_loc(self, main: A.Module) -> Loc:
        """Where `pipeline NAME` is written (the module keeps no location for it; line 1 may be a comment)."""
        for number, line in enumerate(self.sources.get(main.file, "").split("\n"), 1):
            stripped = line.lstrip()
            if stripped.startswith("pipeline") and stripped[8:9] in (" ", "\t"):
                return Loc(main.file, number, len(line) - len(stripped) + 1)
        return Loc(main.file, 1, 1)

    def _done(self, nodes: list[A.DoneDecl], main: A.Module) -> ir.Expr:
        if not nodes:
            if main.pipeline is not None:
                self.error(self._header_loc(main), f"pipeline '{main.pipeline}' has no 'done when' condition")
            return ir.Const(False, BOOL)
        for extra in nodes[1:]:
            self.error(extra.loc, f"'done when' is declared twice (first at {nodes[0].loc})")
        cond = self.expr(nodes[0].cond, Context("done"), BOOL)
        if cond is not None and cond.type != BOOL:
            self.error(nodes[0].cond.loc, f"'done when' needs a bool condition, not {cond.type}")
        return cond if cond is not None else ir.Const(False, BOOL)

    def _order_functions(self, functions: list[ir.Function]) -> list[ir.Function]:
        by_name = {f.name: f for f in functions}
        order: list[ir.Function] = []
        state: dict[str, str] = {}

        # Depth first over the call graph with an explicit stack (a call chain may be thousands
        # of functions long): each frame is a function and the callees it has left to visit.
        for f in functions:
            if state.get(f.name):
                continue
            state[f.name] = "active"
            stack = [(f.name, iter(sorted(self.call_graph.get(f.name, ()))))]
            while stack:
                name, callees = stack[-1]
                callee = next(callees, None)
                if callee is None:
                    stack.pop()
                    state[name] = "done"
                    order.append(by_name[name])
                elif callee not in by_name or state.get(callee) == "done":
                    continue
                elif state.get(callee) == "active":
                    path = [frame[0] for frame in stack]
                    cycle = path[path.index(callee):] + [callee]
                    self.error(by_name[callee].loc, "recursion is not allowed: " + " -> ".join(cycle))
                else:
                    state[callee] = "active"
                    stack.append((callee, iter(sorted(self.call_graph.get(callee, ())))))
        depth: dict[str, int] = {}  # callees come first in `order`
        for f in order:
            depth[f.name] = 1 + max((depth.get(c, 0) for c in self.call_graph.get(f.name, ()) if c in by_name),
                                    default=0)
            if depth[f.name] == MAX_CALL_DEPTH + 1:
                self.error(f.loc, f"function calls nest too deep: '{f.name}' starts a chain of more than "
                                  f"{MAX_CALL_DEPTH} functions, each calling the next; the limit is "
                                  f"{MAX_CALL_DEPTH}")
        return order

    def _unused_warnings(self, items) -> None:
        called = set().union(*self.call_graph.values()) if self.call_graph else set()
        for item in items:
            if isinstance(item, A.FnDecl) and item.name not in called:
                self.sink.warning(item.loc, f"function '{item.name}' is never called")
            elif isinstance(item, A.StateBlock):
                for f in item.fields:
                    registered = self.globals.get(f.name)
                    if registered is None or registered.node is not f:
                        continue  # a duplicate (or reserved) name, already reported
                    if f.name not in self.used_globals and f.loc.file != PRELUDE_NAME:
                        self.sink.warning(f.loc, f"field '{f.name}' is never used")
