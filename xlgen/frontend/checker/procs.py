"""Procs: named pieces of a per-request stage (docs/language.md, `proc`).

A use `f(args)` is a statement. The checker puts f's body in its place, each parameter
replaced by its argument, and checks the result there as stage code. So a proc adds no
construct downstream: the IR, every emitter, the CPU build and the GPU kernel see the
statements as if they were written in the stage, in the same order, with the same bits.

Hygiene, so that the body means the same wherever it is used:
- the body sees its parameters, its own locals and global names, never the caller's locals
  (a free name that is none of these is an error at the use);
- its locals take fresh names where the stage already uses theirs (`t` becomes `t_2`);
- a value parameter's argument is a name or a literal that the body cannot change (a local,
  a const, a launch param, an enum member), so using it in place of the parameter is passing
  it by value, and a constant argument stays a constant (a loop bound, say).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .. import ast as A
from ...core import ir
from ...core.diagnostics import Diagnostic, Loc, did_you_mean
from .rules import Context

# Procs used inside procs: deeper than this is a generated program gone wrong (every use is
# a copy of the body, so depth multiplies the code).
MAX_PROC_DEPTH = 16
# Uses of procs in one program, counting those inside other procs' bodies.
MAX_PROC_USES = 4096

# The AST fields that hold a name a statement or expression uses, and the locals declared.
USE_FIELDS = {A.Name: "id", A.Index: "base", A.MultiIndex: "base", A.Assign: "target", A.MultiAssign: "target"}
DECL_FIELDS = {A.Let: "name", A.For: "var", A.Lanes: "var", A.Reduction: "var"}
ASSIGNS = (A.Assign, A.MultiAssign)

# What each kind of parameter takes, as the messages say it.
WANTS = {"tensor": "a tensor", "pool": "a pool", "array": "a request or shared array field"}


@dataclass(frozen=True)
class ProcParam:
    name: str
    kind: str  # "value" | "array" | "tensor" | "pool"
    type: ir.Type | None  # a value's type, an array's element type; None for tensors and pools
    loc: Loc


@dataclass(frozen=True)
class ProcSig:
    node: A.ProcDecl
    params: tuple[ProcParam, ...]


def walk(nodes):
    """Every node under `nodes` (a node or a tuple of them), parents first."""
    stack = [nodes]
    while stack:
        n = stack.pop()
        if isinstance(n, tuple):
            stack.extend(reversed(n))
        elif isinstance(n, A.Node):
            yield n
            stack.extend(reversed([v for v in vars(n).values() if isinstance(v, (A.Node, tuple))]))


def names_used(nodes) -> set[str]:
    """Every name that `nodes` use or declare."""
    out = set()
    for n in walk(nodes):
        f = USE_FIELDS.get(type(n)) or DECL_FIELDS.get(type(n))
        if f is not None:
            out.add(getattr(n, f))
    return out


def _rewrite(node, renames: dict[str, str], values: dict[str, A.Node]):
    """`node` with names renamed and value parameters replaced by their arguments."""
    if isinstance(node, tuple):
        return tuple(_rewrite(v, renames, values) for v in node)
    if not isinstance(node, A.Node):
        return node
    if isinstance(node, A.Name) and node.id in values:
        return values[node.id]
    changes = {}
    name_field = USE_FIELDS.get(type(node)) or DECL_FIELDS.get(type(node))
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if f.name == name_field:
            new = renames.get(value, value)
        elif isinstance(value, (A.Node, tuple)):
            new = _rewrite(value, renames, values)
        else:
            continue
        if new is not value:
            changes[f.name] = new
    return dataclasses.replace(node, **changes) if changes else node


def _renamed_back(message: str, written: dict[str, str]) -> str:
    """`message` calling the body's renamed locals by the names the proc gives them."""
    for fresh, local in written.items():
        message = message.replace(f"'{fresh}'", f"'{local}'")
    return message


def _as_written(d: Diagnostic, written: dict[str, str]) -> Diagnostic:
    message = _renamed_back(d.message, written)
    return dataclasses.replace(d, message=message) if message != d.message else d


def _plain_value(node: A.Node) -> bool:
    """A name, a literal, an enum member or a negated literal: what a value parameter takes."""
    if isinstance(node, A.Unary) and node.op == "-":
        return isinstance(node.operand, (A.IntLit, A.FloatLit))
    return isinstance(node, (A.Name, A.IntLit, A.FloatLit, A.BoolLit, A.Member))


class ProcRules:
    """The Checker's rules for procs (a mixin of Checker, program.py)."""

    def _proc_signature(self, node: A.ProcDecl) -> None:
        """Its parameters; a proc whose parameters are in error is not checked where it is used."""
        params = []
        seen = set()
        for p in node.params:
            if p.name in seen:
                self.error(p.loc, f"duplicate parameter '{p.name}'")
                params.append(None)
                continue
            seen.add(p.name)
            self._check_local_name(p.name, p.loc)
            ref = p.type
            if ref.name in ("tensor", "pool") and ref.length is None and not ref.open_array:
                params.append(ProcParam(p.name, ref.name, None, p.loc))
            elif ref.length is not None:
                self.error(ref.loc, f"a proc's array parameter is written '{ref.name}[]': it names an array "
                                    "field of any length")
                params.append(None)
            elif ref.open_array:
                elem = self._resolve_type(A.TypeRef(ref.name, loc=ref.loc), allow_array=False)
                params.append(ProcParam(p.name, "array", elem, p.loc))
            else:
                params.append(ProcParam(p.name, "value", self._resolve_type(ref, allow_array=False), p.loc))
        self.procs[node.name] = ProcSig(node, tuple(params)) if None not in params else None

    def _use_proc(self, call: A.Call, ctx: Context):
        """The statements of a use of a proc, checked in place (None where it is rejected)."""
        name = call.func
        sig = self.procs.get(name)
        if sig is None:  # its declaration was rejected, with an error
            return None
        if ctx.kind != "stage":
            where = {"fn": "a function", "arbiter": "an arbiter", "collective": "a collective stage"}.get(
                ctx.kind, "this context")
            self.error(call.loc, f"proc '{name}' cannot be used in {where}: a proc is a piece of a per-request "
                                 "stage (use it in a stage, or in another proc)")
            return None
        chain = [n for n, _, _ in self.inline_stack]
        if name in chain:
            cycle = chain[chain.index(name):] + [name]
            self.error(call.loc, "a proc cannot use itself: " + " -> ".join(cycle))
            return None
        if len(chain) >= MAX_PROC_DEPTH:
            self.error(call.loc, f"procs nest too deep: more than {MAX_PROC_DEPTH} procs, each used in the "
                                 "body of the one before")
            return None
        self.proc_uses += 1
        if self.proc_uses > MAX_PROC_USES:
            if self.proc_uses == MAX_PROC_USES + 1:
                self.error(call.loc, f"more than {MAX_PROC_USES} uses of procs in one program (counting those in "
                                     "procs' bodies): each is a copy of the body")
            return None
        if len(call.args) != len(sig.params):
            self.error(call.loc, f"proc '{name}' takes {len(sig.params)} argument"
                                 f"{'s' if len(sig.params) != 1 else ''}, not {len(call.args)}")
            return None
        renames: dict[str, str] = {}
        values: dict[str, A.Node] = {}
        ok = True
        for param, arg in zip(sig.params, call.args):
            ok = self._proc_argument(name, param, arg, ctx, renames, values) and ok
        if not ok or not self._proc_names(sig, renames, ctx):
            return None
        body = _rewrite(sig.node.body, renames, values)
        written = {fresh: local for local, fresh in renames.items() if local not in {p.name for p in sig.params}}
        self.inline_stack.append((name, call.loc, written))
        floor, ctx.loop_floor = ctx.loop_floor, ctx.loop_depth
        before = {(d.severity, d.loc, d.message) for d in self.sink.items}
        count = len(self.sink.items)
        out = self.block(body, ctx, new_scope=True)
        ctx.loop_floor = floor
        self.inline_stack.pop()
        # A warning about the body (an unused local, say) is said once, with the local's name as
        # written, not at every use (errors: _in_proc_error).
        said = [_as_written(d, written) if d.severity != "error" else d for d in self.sink.items[count:]]
        self.sink.items[count:] = [d for d in said
                                   if d.severity == "error" or (d.severity, d.loc, d.message) not in before]
        return out

    def _proc_argument(self, proc: str, param: ProcParam, arg: A.Node, ctx: Context,
                       renames: dict[str, str], values: dict[str, A.Node]) -> bool:
        what = f"argument '{param.name}' of proc '{proc}'"
        if param.kind == "value":
            if not _plain_value(arg):
                self.expr(arg, ctx)
                self.error(arg.loc, f"{what} is a name or a literal (compute it first: 'let v = ...', then "
                                    "pass 'v')")
                return False
            g = self.globals.get(arg.id) if isinstance(arg, A.Name) and ctx.lookup(arg.id) is None else None
            if g is not None and g.kind not in ("const", "param"):
                self.error(arg.loc, f"{what} is passed by value, and {g.kind} '{arg.id}' may change while the "
                                    f"proc runs: copy it to a local first ('let v = {arg.id}', then pass 'v')")
                return False
            value = self.expr(arg, ctx, param.type)
            if value is None:
                return False
            if isinstance(value.type, ir.ArrayType):
                self.error(arg.loc, f"{what} is a value of type {param.type}, not an array")
                return False
            if not self._same(param.type, value.type, arg.loc, what):
                return False
            literal = isinstance(arg, (A.IntLit, A.FloatLit, A.Unary))
            # A literal keeps the parameter's type wherever the body puts it (`let k = n`).
            values[param.name] = A.Cast(arg, str(param.type), loc=arg.loc) if literal else arg
            return True
        g = self.globals.get(arg.id) if isinstance(arg, A.Name) and ctx.lookup(arg.id) is None else None
        kinds = {"tensor": ("tensor",), "pool": ("pool",), "array": ("request field", "shared field")}[param.kind]
        if g is None or g.kind not in kinds:
            if isinstance(arg, A.Name) and arg.id in self.rejected:
                return False
            found = (f", not {g.kind} '{arg.id}'" if g is not None else
                     f", not the local '{arg.id}'" if isinstance(arg, A.Name) and ctx.lookup(arg.id) else "")
            self.error(arg.loc, f"{what} is {WANTS[param.kind]}{found}")
            return False
        if param.kind == "array":
            field = self.fields.get(arg.id) or self.shared.get(arg.id)
            if field is None:
                return False
            if not isinstance(field.type, ir.ArrayType):
                self.error(arg.loc, f"{what} is an array of {param.type}; '{arg.id}' is a {field.type}")
                return False
            if param.type is not None and field.type.elem != param.type:
                self.error(arg.loc, f"{what} is an array of {param.type}; '{arg.id}' is {field.type}")
                return False
        self.used_globals.add(arg.id)
        renames[param.name] = arg.id
        return True

    def _proc_names(self, sig: ProcSig, renames: dict[str, str], ctx: Context) -> bool:
        """Checks what the body's names refer to (at its first use: the answer is the same at every
        use), and gives its locals fresh names where the stage already uses theirs (added to
        `renames`)."""
        node = sig.node
        params = {p.name: p for p in sig.params}
        declared = {}
        for n in walk(node.body):
            field = DECL_FIELDS.get(type(n))
            if field is not None:
                declared.setdefault(getattr(n, field), n.loc)
        if node.name not in self.proc_names_ok:
            self.proc_names_ok[node.name] = self._proc_body_names(node, params, declared, ctx)
        for local in sorted(declared):
            if local in params or self._global_name(local):
                continue  # an error (a parameter, below; a global, where it is declared)
            fresh, k = local, 2
            sep = "" if local == "xl" else "_"  # (`xl_2` would be a reserved name: `xl2`)
            while fresh in ctx.taken or (fresh != local and fresh in declared) or self._global_name(fresh):
                fresh, k = f"{local}{sep}{k}", k + 1
            ctx.taken.add(fresh)
            if fresh != local:
                renames[local] = fresh
        return self.proc_names_ok[node.name]

    def _proc_body_names(self, node: A.ProcDecl, params: dict, declared: dict, ctx: Context) -> bool:
        ok = True
        for n in walk(node.body):
            field = DECL_FIELDS.get(type(n))
            if field is not None:
                local = getattr(n, field)
                if local in params:
                    self.error(n.loc, f"'{local}' is already defined (a parameter of proc '{node.name}', at "
                                      f"{params[local].loc})")
                    ok = False
        for n in walk(node.body):
            field = USE_FIELDS.get(type(n))
            if field is None:
                continue
            used = getattr(n, field)
            p = params.get(used)
            if p is not None and p.kind == "value" and not isinstance(n, A.Name):
                verb = "cannot assign to" if isinstance(n, ASSIGNS) else "cannot index"
                self.error(n.loc, f"{verb} parameter '{used}' of proc '{node.name}' (a value)")
                ok = False
            elif p is None and used not in declared and not self._global_name(used):
                if ctx.lookup(used) is not None:
                    why = f"; the stage's local '{used}' is not visible in a proc: pass it as an argument"
                else:
                    why = did_you_mean(used, list(params) + list(declared) + list(self.globals))
                self.error(n.loc, f"unknown name '{used}' in proc '{node.name}'{why}")
                ok = False
        return ok

    def _global_name(self, name: str) -> bool:
        return name in self.globals or name in self.members or name == "req_id" or name in self.rejected

    def _unused_procs(self, items) -> None:
        """Warns of procs no stage or proc uses (whether or not their uses were checked)."""
        bodies = tuple(item.body for item in items if isinstance(item, (A.StageDecl, A.ProcDecl)))
        used = {n.call.func for n in walk(bodies) if isinstance(n, A.CallStmt)}
        for item in items:
            if isinstance(item, A.ProcDecl) and item.name not in used:
                self.sink.warning(item.loc, f"proc '{item.name}' is never used (its body is checked where it "
                                            "is used)")

    def _in_proc_error(self, loc: Loc, message: str) -> None:
        """An error in a proc's body, said once (not again at each use that repeats it), with the
        uses that put the body there, innermost first (the first three)."""
        for _, _, written in reversed(self.inline_stack):
            message = _renamed_back(message, written)
        if (loc, message) in self.said_in_procs:
            return
        self.said_in_procs.add((loc, message))
        uses = [f" (in proc '{name}' used at {at})" for name, at, _ in reversed(self.inline_stack)]
        more = f" (and {len(uses) - 3} more uses around them)" if len(uses) > 3 else ""
        self.sink.error(loc, message + "".join(uses[:3]) + more)
