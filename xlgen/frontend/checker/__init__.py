"""The checker: AST -> typed IR. Resolves names, checks types, folds constants, and collects
every error (never stopping at the first) as `file:line:col` diagnostics.

Entry points: `load_program(path)` (reads the file and its imports) or
`check_modules(modules, sources)` (loading.py). The Checker (program.py) is built from
mixins, one per kind of rule: declarations.py, statements.py, parallel.py (collectives,
lanes loops, reductions), expressions.py; what they share is in rules.py.
"""

from .loading import PRELUDE_NAME, check_modules, load_modules, load_program, read_source  # noqa: F401
from .program import Checker  # noqa: F401
