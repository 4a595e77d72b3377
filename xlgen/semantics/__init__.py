"""The executable semantics of docs/semantics.md, in Python: what a generated simulator
calls and the checker's constant folder evaluates. `ops` (exact i32/u32/f32 operations,
runtime errors, collectives), `py_ops` (the IR's operators as Python code), `vec`
(lanes loops and reductions on numpy arrays), `builtins` (the prelude's builtins) and
`xlmath` (exp, log, tanh, rsqrt). Their C++ twin is xlgen/runtime/xl_runtime.cuh.

May import: xlgen.core.
"""
