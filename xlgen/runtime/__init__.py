"""The runtimes: running generated code. `sim` (the simulator's engine: rounds, arbiters,
collectives, hang reports), `cpu` (the CPU build, compiled and driven through ctypes),
`gpu` (the mega-kernel through CuPy and NVRTC), `tensors` (weights bound at launch). The
C++ runtime header xl_runtime.cuh and the prelude (prelude.xl) live here as data.

May import: xlgen.core, xlgen.semantics, xlgen.backends (the state layout and names).
"""
