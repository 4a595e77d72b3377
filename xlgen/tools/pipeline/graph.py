"""`xlgen graph`: the stage state machine of a pipeline, as Graphviz DOT.

States are the members of an enum-typed request field (the one the most guards
test). A stage whose guard says `field == A` and whose body assigns `field = B`
(anywhere, under any condition) is an edge A -> B labelled with the stage.
"""

from __future__ import annotations

from collections import Counter

from ...core import ir


def _guard_states(expr, field: str) -> set[int]:
    """Members the guard requires `field` to equal (conjunctions and disjunctions of ==)."""
    if isinstance(expr, ir.Binary):
        if expr.op == "==" and isinstance(expr.left, ir.Var) and expr.left.name == field and isinstance(expr.right, ir.Const):
            return {int(expr.right.value)}
        if expr.op in ("&&", "||"):
            return _guard_states(expr.left, field) | _guard_states(expr.right, field)
    return set()


def _assigned_states(stmts, field: str) -> set[int]:
    out: set[int] = set()
    for s in stmts:
        if isinstance(s, ir.Assign) and s.target.name == field and s.index is None:
            out |= _possible_values(s.value)
        elif isinstance(s, ir.If):
            for _, body in s.arms:
                out |= _assigned_states(body, field)
            out |= _assigned_states(s.otherwise, field)
        elif isinstance(s, ir.For):
            out |= _assigned_states(s.body, field)
    return out


def _possible_values(e) -> set[int]:
    if isinstance(e, ir.Const):
        return {int(e.value)}
    if isinstance(e, ir.Select):
        return _possible_values(e.then) | _possible_values(e.otherwise)
    return set()


def state_field(program: ir.Program) -> ir.FieldDecl | None:
    """The enum field most guards test: the pipeline's state."""
    counts: Counter = Counter()
    enum_fields = {f.name for f in program.request_fields if isinstance(f.type, ir.EnumType) and not f.type.is_flags}
    for s in program.stages:
        for name in enum_fields:
            if _guard_states(s.guard, name):
                counts[name] += 1
    if not counts:
        return None
    return program.field(counts.most_common(1)[0][0])


def no_state_machine_note(program: ir.Program) -> str | None:
    """What the graph shows instead, when the pipeline has no state enum (one line), else None."""
    if state_field(program) is not None:
        return None
    return (f"note: pipeline {program.name} has no enum request field that a stage's guard compares "
            "(as in `stage s when state == A`), so there is no state machine to draw; the graph shows its "
            f"{len(program.stages)} stage(s) in execution order")


def to_dot(program: ir.Program) -> str:
    field = state_field(program)
    lines = [f'digraph "{program.name}" {{', "    rankdir=LR;", '    node [shape=box, style=rounded, fontname="Helvetica"];',
             '    edge [fontname="Helvetica", fontsize=10];']
    if field is None:  # no state enum: show the stages in execution order
        names = [s.name for s in program.stages]
        lines += [f'    "{name}";' for name in names]  # one stage (no edge) is still drawn
        for a, b in zip(names, names[1:]):
            lines.append(f'    "{a}" -> "{b}";')
        return "\n".join(lines + ["}"]) + "\n"
    members = field.type.members
    initial = int(field.init.value) if isinstance(field.init, ir.Const) else 0
    for i, m in enumerate(members):
        shape = ", peripheries=2" if program.done is not None and _guard_states(program.done, field.name) == {i} else ""
        bold = ", style=\"rounded,bold\"" if i == initial else ""
        lines.append(f'    "{m}" [label="{m}"{shape}{bold}];')
    for s in program.stages:
        sources = _guard_states(s.guard, field.name)
        targets = _assigned_states(s.body, field.name)
        kind = " (arbiter)" if s.is_arbiter else ""
        for a in sorted(sources):
            for b in sorted(targets):
                lines.append(f'    "{members[a]}" -> "{members[b]}" [label="{s.name}{kind}"];')
    return "\n".join(lines + ["}"]) + "\n"
