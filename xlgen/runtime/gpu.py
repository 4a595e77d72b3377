"""The GPU backend: compiles NAME_gpu.cu with NVRTC (CuPy), launches the persistent
kernel once, waits on it with a timeout, and reads back traces and state.

CuPy is imported only here, and only when a GPU run is asked for.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass

import numpy as np

from ..layout import dtype_from_layout
from ..resources import runtime_dir
from .cpu import params_array
from .sim import LaunchConfig, RunResult, make_params, make_requests, to_array

THREADS_PER_BLOCK = 128  # 4 warps: 4 requests in flight per block
_MODULES: dict[str, object] = {}


class GpuError(RuntimeError):
    pass


class HangError(GpuError):
    """The kernel did not finish in time; `report` says what each warp was doing."""

    def __init__(self, report: str):
        super().__init__(report)
        self.report = report


def available() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no CuPy, no driver, or no device
        return False


def single_source(compiled) -> str:
    """One translation unit (so CuPy's cache key covers everything), with #line
    directives so compiler messages name the generated files and their lines."""
    parts = []
    for path in (runtime_dir() / "xl_runtime.cuh", compiled.dir / f"{compiled.name}_kernel.cuh",
                 compiled.dir / f"{compiled.name}_gpu.cu"):
        text = path.read_text()
        text = re.sub(r'^#include "(xl_runtime\.cuh|\w+_kernel\.cuh)"\s*$', "", text, flags=re.M)
        text = text.replace("#pragma once", "")
        parts.append(f'#line 1 "{path}"\n{text}')
    return "\n".join(parts)


def _xl_line_for(path: str, line: int) -> str:
    """The .xl location whose `// file.xl:N` marker precedes a generated line."""
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return ""
    for i in range(min(line, len(lines)) - 1, -1, -1):
        m = re.match(r"\s*// (\S+\.xl:\d+)", lines[i])
        if m:
            return m.group(1)
    return ""


def compile_module(compiled):
    import cupy

    key = hashlib.sha256(single_source(compiled).encode()).hexdigest()
    if key in _MODULES:
        return _MODULES[key]
    cc = cupy.cuda.Device().compute_capability
    options = ("-std=c++17", "--fmad=false", f"-arch=sm_{cc}", "-default-device")
    try:
        module = cupy.RawModule(code=single_source(compiled), options=options, enable_cooperative_groups=True)
        module.get_function("xl_run_deterministic")
        module.get_function("xl_run_fast")
    except cupy.cuda.compiler.CompileException as exc:
        raise GpuError(_explain_compile_error(str(exc))) from None
    _MODULES[key] = module
    return module


def _explain_compile_error(log: str) -> str:
    out = ["compiling the generated CUDA failed:"]
    for line in log.splitlines():
        m = re.match(r"(\S+)\((\d+)\): (error|warning)", line)
        if m:
            where = _xl_line_for(m.group(1), int(m.group(2)))
            out.append(line + (f"   [from {where}]" if where else ""))
        elif line.strip():
            out.append(line)
    return "\n".join(out[:60])


class _MappedFlags:
    """A few int32 words of pinned host memory that the running kernel can read."""

    def __init__(self, n: int = 4):
        import cupy

        rt = cupy.cuda.runtime
        self.nbytes = 4 * n
        self.host_ptr = rt.hostAlloc(self.nbytes, rt.hostAllocMapped)
        # With unified addressing (every 64-bit CUDA platform) a mapped host pointer is valid on the device.
        get_device_pointer = getattr(rt, "hostGetDevicePointer", None)
        self.device_ptr = get_device_pointer(self.host_ptr, 0) if get_device_pointer else self.host_ptr
        import ctypes

        self.view = np.ctypeslib.as_array((ctypes.c_int32 * n).from_address(self.host_ptr))
        self.view[:] = 0

    def close(self):
        import cupy

        cupy.cuda.runtime.freeHost(self.host_ptr)


@dataclass
class GpuTiming:
    kernel_ms: float
    grid: int
    threads: int
    barriers: int


def grid_size(kernel, shared_bytes: int, useful_warps: int) -> int:
    """As many blocks as fit on the device at once (the kernel is persistent), but no
    more than the batch can use: idle blocks only make every grid barrier slower."""
    import cupy

    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    try:
        per_sm = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.kernel.ptr, THREADS_PER_BLOCK,
                                                                              shared_bytes)
    except Exception:
        per_sm = 4
    fit = max(1, sms * max(1, per_sm))
    wanted = -(-useful_warps // (THREADS_PER_BLOCK // 32))
    return max(1, min(fit, max(wanted, sms)))


def run(compiled, params=None, inputs: list[dict] | None = None, config: LaunchConfig | None = None,
        mode: str = "deterministic", timeout: float = 120.0, grid: int | None = None) -> RunResult:
    import cupy

    module = compiled.sim_module()
    config = config or LaunchConfig()
    p = params if isinstance(params, module.Params) else make_params(module, params)
    inputs = inputs if inputs is not None else [{}]
    n = len(inputs)
    req_dtype = dtype_from_layout(module.REQUEST_LAYOUT)
    shared_dtype = dtype_from_layout(module.SHARED_LAYOUT)
    reqs_host = to_array(make_requests(module, p, inputs), module.REQUEST_LAYOUT, req_dtype)
    shared_host = to_array([module.init_shared(p)], module.SHARED_LAYOUT, shared_dtype)
    packed = params_array(module, p) if module.Params.TYPES else np.zeros(1, dtype=np.uint32)

    cu = compile_module(compiled)
    kernel = cu.get_function("xl_run_deterministic" if mode == "deterministic" else "xl_run_fast")
    shared_bytes = (THREADS_PER_BLOCK // 32) * req_dtype.itemsize
    if shared_bytes > 48 * 1024:
        kernel.max_dynamic_shared_size_bytes = shared_bytes
    blocks = grid or grid_size(kernel, shared_bytes, config.max_active if mode == "deterministic" else n)
    width = _record_words(compiled)
    capacity = max(4096, 64 * n)  # records; a run that needs more is repeated with room for all
    flags = _MappedFlags()
    try:
        while True:
            # Everything is allocated and zeroed on the kernel's own stream: a
            # non-blocking stream does not wait for work queued on the default one.
            stream = cupy.cuda.Stream(non_blocking=True)
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            with stream:
                d_reqs = cupy.asarray(reqs_host.view(np.uint32))
                d_shared = cupy.asarray(shared_host.view(np.uint32))
                d_params = cupy.asarray(packed.view(np.uint32))
                d_ctl = cupy.zeros(16, dtype=np.uint32)
                list_len = max(1, min(config.max_active, n))
                d_active = cupy.zeros(2 * list_len, dtype=np.int32)  # this round's and the next round's lists
                d_keep = cupy.zeros(list_len, dtype=np.int8)
                d_records = cupy.zeros((capacity, width), dtype=np.uint32)
                d_count = cupy.zeros(1, dtype=np.uint64)
                d_where = cupy.full((blocks * THREADS_PER_BLOCK // 32, 4), -1, dtype=np.int32)
                stream.synchronize()
                flags.view[:] = 0
                start.record(stream)
                kernel((blocks,), (THREADS_PER_BLOCK,),
                       (d_reqs, d_shared, d_params, np.int32(n), np.int32(config.max_active),
                        np.int32(config.max_rounds), d_ctl, d_active, d_keep, d_records,
                        np.uint64(capacity), d_count, np.uint64(flags.device_ptr), d_where),
                       shared_mem=shared_bytes)
                end.record(stream)
            _wait(end, timeout, flags, d_where, d_ctl, compiled, stream)
            count = int(d_count.get(stream=stream)[0])
            if count <= capacity:
                break
            capacity = count
        kernel_ms = cupy.cuda.get_elapsed_time(start, end)
        ctl = d_ctl.get()
        table = d_records[:count].get()
        order = np.argsort(table[:, 0], kind="stable")
        reqs_out = d_reqs.get().view(req_dtype).reshape(n)
        shared_out = d_shared.get().view(shared_dtype).reshape(1)
        rounds = int(ctl.view(np.int32)[4])
        barriers = int(ctl[10]) | (int(ctl[11]) << 32)
    finally:
        flags.close()
    result = RunResult(records=table[order], requests=reqs_out, shared=shared_out, rounds=rounds,
                       backend=f"gpu-{mode}")
    result.extra["timing"] = GpuTiming(kernel_ms, blocks, THREADS_PER_BLOCK, barriers)
    return result


def _record_words(compiled) -> int:
    from .sim import record_width

    return record_width(compiled.sim_module())


def _wait(event, timeout: float, flags: _MappedFlags, d_where, d_ctl, compiled, stream) -> None:
    """Wait for the kernel with a timeout; on a hang abort it and report where each warp was."""
    deadline = time.monotonic() + timeout
    while not event.done:
        if time.monotonic() > deadline:
            flags.view[0] = 1  # the kernel polls this and exits
            grace = time.monotonic() + 10.0
            while not event.done and time.monotonic() < grace:
                time.sleep(0.01)
            if not event.done:
                raise HangError("the kernel ignored the abort flag for 10 s; the GPU may need a reset")
            raise HangError(hang_report(compiled, d_where.get(), d_ctl.get(), timeout))
        time.sleep(0.0005)
    stream.synchronize()


def hang_report(compiled, where: np.ndarray, ctl: np.ndarray, timeout: float) -> str:
    program = compiled.program
    ctl_i = ctl.view(np.int32)
    lines = [f"kernel did not finish within {timeout:.1f} s; aborted in round {ctl_i[4]} "
             f"({ctl_i[2]} active requests, queue at {ctl_i[3]})",
             "warp  request  round  stage             source"]
    shown = 0
    for warp, (req, rnd, stage, _line) in enumerate(where.tolist()):
        if req < 0:
            continue
        if 0 <= stage < len(program.stages):
            s = program.stages[stage]
            name, src = s.name, f"{s.loc.file}:{s.loc.line}"
        else:
            name, src = "(per-request stages)", program.main_file
        lines.append(f"{warp:>4}  {req:>7}  {rnd:>5}  {name:<16}  {src}")
        shown += 1
        if shown >= 64:
            lines.append("  ...")
            break
    return "\n".join(lines)
