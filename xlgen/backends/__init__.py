"""The back ends: the typed IR to generated code. `emit_python` (+ `emit_vec` for lanes
loops and reductions) and `emit_cpp`, each driven by an operator table (`semantics.py_ops`,
`cpp_ops`), through the Jinja2 templates (templates/); `layout` (the state's word layout),
`names` (identifiers that cannot clash) and `build` (check, render, write, cache and load a
pipeline: `xlgen.build.load`).

May import: xlgen.core, xlgen.semantics, xlgen.frontend.
"""
