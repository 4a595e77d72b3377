"""Random well-typed xl programs for differential testing of the backends (Csmith-style).

`generate(seed)` returns a `FuzzCase`: the source of one complete pipeline and a
few launches for it (params, per-request inputs, launch settings); a program with a
collective stage also gets a launch of hundreds of requests (`crowd_launch`). Everything is
a function of the seed (`random.Random(seed)`), so a failing case is reproduced,
and shrunk by hypothesis (`programs()`), by its seed alone.

Every program the generator writes must be accepted by the checker: a
CompileError on a generated program is a bug in this file (or in the checker).
Runtime errors, on the other hand, are intended: division by zero, shifts by
out-of-range amounts, out-of-range array indexes and f32 -> int casts, builtin
argument errors, errors in guards, in `done when`, in helpers and in arbiters,
the watchdog. The backends must report them identically. How often operations
take their error-prone form varies per program (swarm testing): some programs
fail early and often, others run all their rounds. Half the programs draw some
names from NASTY_NAMES: keywords, macros and helpers of the generated Python and
C++, which the emitters must rename.

The typing rules the generator relies on (see xlgen/frontend/checker/):
- u32 literals always carry the `u` suffix and i32 literals never do, so an
  unsuffixed literal only takes `u32` from its context where an i32 expression
  sits under `as u32` (the cast passes its target down as a hint). Such operands
  (i32, or bool comparisons of i32) are written `(e as i32) as u32`, which pins
  them to i32 first. The amount of `x <<= e` is checked with x's type as hint,
  so it is generated with x's type.
- an index that would fold to a constant must be in range, so constant indexes
  are always literals in range; dynamic ones are often out of range.
- locals never shadow a visible local or any global name; names of closed
  scopes are reused (sibling blocks), sometimes with another type.

The package: model.py (what the generator knows), base.py (the Generator), expressions.py,
statements.py and program.py (its productions), run.py (generate, programs, run_case).
"""

from .model import FuzzCase, Launch  # noqa: F401
from .run import backends, generate, programs, run_backend, run_case  # noqa: F401
