"""One launch of the real pair for Nsight Compute (GPU): plain greedy, one prompt, 32 new tokens, a team of 16
warps x XLGEN_TEAM_BLOCKS blocks (default 8). What the kernel's spilled registers cost (docs/benchmarks.md,
fifteenth session): its local-memory loads and how many hit the L1.

    M=smsp__inst_executed.sum,smsp__inst_executed_op_local_ld.sum,smsp__inst_executed_op_local_st.sum,\\
    l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_local_op_ld_lookup_hit.sum,\\
    lts__t_sectors_srcunit_tex_op_read.sum,gpu__time_duration.sum
    XLGEN_TEAM_BLOCKS=8 ncu --metrics $M -k regex:xl_run_deterministic -c 1 python3 scripts/ncu_spills.py
"""

import os

from xlgen.backends.build import load
from xlgen.companion import load as load_companion
from xlgen.core.resources import data_dir
from xlgen.runtime import gpu
from xlgen.runtime.sim import LaunchConfig

rp = load_companion(data_dir("stages") / "byte_spec_tools.py").beside("real_pair")
binding = rp.load_binding()
compiled = load(binding.pipeline_path())
inputs = rp.request_inputs(rp.load_prompts()[:1], 32, binding)
params = rp.launch_params(compiled.sim_module(), rp.load_weights(), binding.params("plain"))
result = gpu.run(compiled, params, inputs, LaunchConfig(max_active=1), team_warps=16,
                 team_blocks=int(os.environ.get("XLGEN_TEAM_BLOCKS", "8")))
print(f"kernel {result.extra['timing'].kernel_ms:.2f} ms, {result.rounds} rounds, team 16 x {result.extra['team_blocks']}")
