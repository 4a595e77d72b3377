"""The front end: `.xl` text to the typed IR. `parser` (Lark grammar, grammar/xl.lark, to
the untyped AST of `ast`, with `comments` for the formatter), `printer` (AST back to
canonical text: `xlgen fmt`), `checker` (names, types, rules, constant folding: every
error as `file:line:col`) and `check_tooling` (the declarations for the tools).

May import: xlgen.core, xlgen.semantics (the constant folder evaluates what the
simulator would).
"""
