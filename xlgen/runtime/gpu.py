"""The GPU backend: compiles NAME_gpu.cu with NVRTC (CuPy), launches the persistent
kernel once, waits on it with a timeout, and reads back traces and state.

CuPy is imported only here, and only when a GPU run is asked for.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..backends.layout import collective_frame_words, dtype_from_layout
from ..backends.names import py
from ..core import ir
from ..core.resources import runtime_dir
from ..semantics.ops import POOL_DTYPES
from .cpu import params_array
from .sim import LaunchConfig, RunResult, make_params, make_requests, pool_table, to_array

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


def single_source(compiled, timeline: bool = False) -> str:
    """One translation unit (so the content hash covers everything), with #line
    directives so compiler messages name the generated files and their lines. With
    `timeline`, the kernel timeline's build (xl_timeline.cuh, NAME_gpu_timeline.cu)."""
    parts = []
    paths = [runtime_dir() / "xl_runtime.cuh", compiled.dir / f"{compiled.name}_kernel.cuh"]
    if timeline:
        paths += [runtime_dir() / "xl_timeline.cuh", compiled.timeline_gpu_path()]
    else:
        paths += [compiled.dir / f"{compiled.name}_gpu.cu"]
    for path in paths:
        text = path.read_text()
        text = re.sub(r'^#include "(xl_runtime\.cuh|xl_timeline\.cuh|\w+_kernel\.cuh)"\s*$', "", text, flags=re.M)
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


# Binary32 exactly as docs/semantics.md: no FMA contraction, subnormals kept, correctly
# rounded division and square root. CuPy's own compile path (RawModule) always appends
# -ftz=true, which flushes subnormals (fuzzing found a flushed 1e-45 flipping a guard),
# so xlgen calls NVRTC itself with exactly these options and loads the cubin.
NVRTC_OPTIONS = ("-std=c++17", "--fmad=false", "--ftz=false", "--prec-div=true", "--prec-sqrt=true",
                 "-default-device")


class CompiledModule:
    """A loaded cubin: get(name) returns a launchable cupy Function."""

    def __init__(self, cubin: bytes):
        import cupy

        self.module = cupy.cuda.function.Module()
        self.module.load(cubin)
        self._functions = {}

    def get_function(self, name: str):
        if name not in self._functions:
            self._functions[name] = self.module.get_function(name)
        return self._functions[name]


def nvrtc_compile(source: str, name: str, options: tuple[str, ...]) -> bytes:
    from cupy.cuda import nvrtc

    prog = nvrtc.createProgram(source, name, [], [])
    try:
        try:
            nvrtc.compileProgram(prog, list(options))
        except nvrtc.NVRTCError:
            raise GpuError(_explain_compile_error(nvrtc.getProgramLog(prog))) from None
        return nvrtc.getCUBIN(prog)
    finally:
        nvrtc.destroyProgram(prog)


def cubin_plan(compiled, team_warps: int, cc: str, timeline: bool = False,
               team_blocks: int = 1) -> tuple[str, tuple[str, ...], Path]:
    """What compile_module compiles for a device of compute capability `cc` ("90"): the source,
    the NVRTC options, and the cached cubin's path (named by their content hash, so a cubin
    compiled elsewhere from the same source and options is used as is: scripts/precompile_cubins.py)."""
    mode = request_mode(request_bytes(compiled), team_warps, team_blocks)
    options = NVRTC_OPTIONS + (f"-arch=sm_{cc}",) + kernel_options(team_warps, mode, team_blocks)
    source = single_source(compiled, timeline)
    key = hashlib.sha256((source + " ".join(options)).encode()).hexdigest()[:16]
    return source, options, compiled.dir / f"{compiled.name}_gpu_{key}.cubin"


def compile_module(compiled, team_warps: int = 1, timeline: bool = False, team_blocks: int = 1) -> CompiledModule:
    """Compile NAME_gpu.cu (with `timeline`, its timeline build) for this device, cached by
    content hash (in memory and as a cubin)."""
    import cupy

    source, options, cubin_path = cubin_plan(compiled, team_warps, cupy.cuda.Device().compute_capability, timeline,
                                             team_blocks)
    key = cubin_path.stem
    if key in _MODULES:
        return _MODULES[key]
    if cubin_path.exists():
        cubin = cubin_path.read_bytes()
    else:
        cubin = nvrtc_compile(source, f"{compiled.name}_gpu.cu", options)
        cubin_path.write_bytes(cubin)
    _MODULES[key] = CompiledModule(cubin)
    return _MODULES[key]


# Where a warp's stages keep its request (kernel.cuh.j2, XL_REQUEST_IN_SHARED): 0 global
# memory; 1 a shared-memory copy, copied back every round; 2 a shared-memory copy with
# every store written through. 1 measured fastest (A/B in docs/gpu.md) for requests of a
# few KB; a block's copies beyond REQUEST_SHARED_MAX stay in global memory (0): the real
# pair's 200 KB of scratch would not fit, or would be copied twice a round for nothing.
REQUEST_IN_SHARED = 1
REQUEST_SHARED_MAX = 48 * 1024


def experiment_options() -> tuple[str, ...]:
    """XLGEN_NVRTC_OPTIONS: extra options for experiments (e.g. -DXL_ROUND_BARRIERS=2)."""
    return tuple(os.environ.get("XLGEN_NVRTC_OPTIONS", "").split())


def request_bytes(compiled) -> int:
    return dtype_from_layout(compiled.sim_module().REQUEST_LAYOUT).itemsize


def request_mode(request_bytes: int = 0, team_warps: int = 1, team_blocks: int = 1) -> int:
    """XL_REQUEST_IN_SHARED as XLGEN_NVRTC_OPTIONS sets it, else by the block's copies' size (a team
    of several blocks: 1, a copy in each block's shared memory, whatever its size)."""
    for option in experiment_options():
        if option.startswith("-DXL_REQUEST_IN_SHARED="):
            return int(option.split("=", 1)[1])
    if team_blocks > 1:
        return 1
    teams = THREADS_PER_BLOCK // 32 if team_warps == 1 else 1
    return REQUEST_IN_SHARED if teams * request_bytes <= REQUEST_SHARED_MAX else 0


def kernel_options(team_warps: int = 1, mode: int = REQUEST_IN_SHARED, team_blocks: int = 1) -> tuple[str, ...]:
    extra = experiment_options()
    if not any(o.startswith("-DXL_REQUEST_IN_SHARED=") for o in extra):
        extra = (f"-DXL_REQUEST_IN_SHARED={mode}",) + extra
    if team_warps > 1:
        extra += (f"-DXL_TEAM_WARPS={team_warps}",)
    if team_blocks > 1:
        extra += (f"-DXL_TEAM_BLOCKS={team_blocks}",)
    if phase2_team(team_warps, team_blocks):
        extra += ("-DXL_PHASE2_TEAM=1",)
    return extra


def phase2_team(team_warps: int, team_blocks: int) -> bool:
    """Whether the grid's first team takes no request and serves phase 2 alone, on SMs of its own
    (xl_runtime.cuh, XL_PHASE2_TEAM; the host launches one team more): by default for a team of
    several blocks, whose spare SMs cost nothing at the batches it is chosen for (H200, real pair:
    plain greedy +5.4% at batch 1, +2.4% at batch 8; docs/benchmarks.md, twenty-fourth session).
    XLGEN_PHASE2_TEAM=0 or 1 sets it for any team of several warps (A/B runs)."""
    if team_warps == 1:
        return False
    value = os.environ.get("XLGEN_PHASE2_TEAM")
    return value == "1" if value in ("0", "1") else team_blocks > 1


# A request's team: 1 warp, or a block of this many warps (xl_runtime.cuh, XL_TEAM_WARPS):
# a lanes loop then spreads over all its threads, one whose iterations hold reductions
# over its warps. Deterministic mode only; results do not depend on it.
TEAM_WARPS = (1, 2, 4, 8, 16, 32)


# A team of several blocks: a thread-block cluster of this many blocks of `team_warps` warps, one
# block per SM (xl_runtime.cuh, XL_TEAM_BLOCKS), each with a copy of the request in its shared
# memory (at most CLUSTER_REQUEST_MAX bytes: an H100's or H200's 227 KB a block, less the
# kernel's own shared variables). Portable cluster sizes only (<= 8): 16, a non-portable size, ran
# the real pair 6% slower than 8 at batch 1 (H200, docs/benchmarks.md, twenty-ninth session).
TEAM_BLOCKS = (1, 2, 4, 8)
CLUSTER_REQUEST_MAX = 212 * 1024


def team_blocks_default() -> int | None:
    """XLGEN_TEAM_BLOCKS; None where it is unset (the runtime chooses: choose_team_blocks)."""
    value = os.environ.get("XLGEN_TEAM_BLOCKS")
    return int(value) if value else None


# The blocks of a team the runtime chooses for a team of several warps: TEAM_BLOCKS_CHOSEN where
# every request of the batch gets its cluster within half of the SMs (an H100's 132: batches of up
# to 8), else 1. Measured side by side on an H100 with the real pair (docs/benchmarks.md, fourteenth
# session): 8 blocks against 1, plain greedy 6% faster at batch 1 and 8, ASBS 20% and 16%, a
# 9-position pass 219 us against 372; 2 blocks were 12% slower than 1 at batch 1.
TEAM_BLOCKS_CHOSEN = 8


def choose_team_blocks(program, team_warps: int, mode: str, max_active: int, sms: int, request_bytes: int) -> int:
    """The blocks of a team where neither the caller nor XLGEN_TEAM_BLOCKS sets them (only a program with
    matrix-vector loops to spread gains from more than one: wants_team)."""
    if team_warps == 1 or mode != "deterministic" or request_bytes > CLUSTER_REQUEST_MAX or not wants_team(program):
        return 1
    return TEAM_BLOCKS_CHOSEN if max(1, max_active) * TEAM_BLOCKS_CHOSEN * 2 <= sms else 1


def max_clusters(kernel, threads: int, shared_bytes: int, team_blocks: int, sms: int) -> int:
    """Clusters of `team_blocks` blocks taken as resident at once: half of the SMs' share (a cluster
    lies within one GPC, so not every SM can take part; 7 clusters of 16 fit an H100's 132 SMs)."""
    import cupy

    try:
        per_sm = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.ptr, threads, shared_bytes)
    except Exception:
        per_sm = 1
    return max(1, sms * max(1, per_sm) // team_blocks // 2)


def team_warps_default() -> int | None:
    """XLGEN_TEAM_WARPS, for running existing tools and the fuzzer with teams; None where it is
    unset (the runtime chooses: choose_team_warps)."""
    value = os.environ.get("XLGEN_TEAM_WARPS")
    return int(value) if value else None


# A team per request of at most this many warps per SM, on average over the device: a batch of up
# to two requests per SM gets teams of 16 warps, a larger one smaller teams, so that every request
# of the batch is served at once.
TEAM_WARPS_PER_SM = 32
# The largest team the runtime chooses: 16 warps, whose threads get 128 registers where a team of
# 32 (a 1024-thread block) gets 64 and spills. Measured side by side on an H100 with the real pair
# (docs/benchmarks.md, eleventh session): 16 gave 9.5% more tokens/s than 32 at batch 1, 7.6% at
# batch 8 and 6% at batch 32 (plain greedy; ASBS within 1%).
TEAM_WARPS_CHOSEN_MAX = 16


def wants_team(program) -> bool:
    """Whether a per-request stage holds a lanes loop whose iterations hold reductions (matrix-vector
    work, which a team spreads over its warps); other programs gain nothing from a team."""
    from ..core import ir

    return any(isinstance(x, ir.Lanes) and x.by_warp for s in program.per_request_stages for x in ir.statements(s.body))


def choose_team_warps(program, mode: str, max_active: int, sms: int) -> int:
    """The team the runtime picks where neither the caller nor XLGEN_TEAM_WARPS sets one: one warp,
    except in deterministic mode for a program that wants teams (wants_team), where it is the
    largest of TEAM_WARPS up to TEAM_WARPS_CHOSEN_MAX with max_active teams within
    TEAM_WARPS_PER_SM warps per SM."""
    if mode != "deterministic" or not wants_team(program):
        return 1
    return max(w for w in TEAM_WARPS if w == 1 or (w <= TEAM_WARPS_CHOSEN_MAX
                                                   and max(1, max_active) * w <= sms * TEAM_WARPS_PER_SM))


def request_shared_bytes(request_bytes: int, team_warps: int = 1, team_blocks: int = 1) -> int:
    """Dynamic shared memory per block: a request slot per team (a warp, or with teams of
    several warps the block), unless requests stay in global memory."""
    teams = THREADS_PER_BLOCK // 32 if team_warps == 1 else 1
    return teams * request_bytes if request_mode(request_bytes, team_warps, team_blocks) else 0


def _set_dynamic_shared(function, nbytes: int) -> None:
    if nbytes > 48 * 1024:
        from cupy.cuda import driver

        driver.funcSetAttribute(function.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes)


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
    kernel_ms: float  # device time between events around the whole run
    grid: int
    threads: int
    barriers: int
    wall_ms: float = 0.0  # host time from the first launch until the host saw completion
    launches: int = 1  # kernel (or graph) launches the host made


def grid_size(kernel, shared_bytes: int, useful_warps: int, threads: int = THREADS_PER_BLOCK) -> int:
    """As many blocks as fit on the device at once (the kernel is persistent), at least
    one per SM (requests are spread over the blocks first, so a small batch gets an SM
    per request: measured faster than packing 4 per SM, at no cost in barrier time), but
    no more than the batch can use. A batch that fits one block gets one block: its
    rounds need no grid barrier (a warp per SM sub-partition, so no less compute)."""
    import cupy

    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    try:
        per_sm = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.ptr, threads, shared_bytes)
    except Exception:
        per_sm = 4
    fit = max(1, sms * max(1, per_sm))
    wanted = -(-useful_warps // (threads // 32))
    if wanted <= 1:
        return 1
    return max(1, min(fit, max(wanted, sms)))


MODES = ("deterministic", "fast", "host-loop", "graph")

# The kernel timeline (xl_timeline.cuh): words per event and per team header, and the buffer's
# bounds. A team's slice holds what TIMELINE_ROUNDS rounds of its share of the batch write; a
# run that wrote more is repeated once with room for all, within TIMELINE_MAX_BYTES.
TIMELINE_WORDS, TIMELINE_HEADER_WORDS = 8, 4
TIMELINE_ROUNDS = 512
TIMELINE_MIN_EVENTS = 1024
TIMELINE_MAX_BYTES = 1 << 30


@dataclass
class TimelineBuffers:
    """What the timeline build of a kernel wrote (xlgen/tools/measure/timeline.py turns it into a trace):
    `events[team, k]` one event of TIMELINE_WORDS words (kind, stage, round, request, start ns
    low and high word, end ns low and high word); `headers[team]`: events the team tried to
    write (beyond `capacity` they were dropped), %smid, block, warp in the block."""

    events: np.ndarray  # (teams, capacity, TIMELINE_WORDS) uint32
    headers: np.ndarray  # (teams, TIMELINE_HEADER_WORDS) uint32
    capacity: int
    mode: str
    team_warps: int
    grid: int
    threads: int
    team_blocks: int = 1  # blocks per team (a cluster): a team's header names its first block
    phase2_team: bool = False  # team 0 served phase 2 alone (XL_PHASE2_TEAM)

    @property
    def dropped(self) -> int:
        return int(np.maximum(self.headers[:, 0].astype(np.int64) - self.capacity, 0).sum())


def timeline_capacity(program, teams: int, requests: int, max_active: int, mode: str) -> int:
    """Events per team: TIMELINE_ROUNDS rounds (fast mode: iterations of each request) of what
    one team writes in a round, a request and its stages for each of its share of the batch,
    its barrier, and in block 0 phase 2 and its parts; within TIMELINE_MAX_BYTES in all."""
    stages = len(program.per_request_stages)
    share = -(-(requests if mode == "fast" else min(max_active, requests)) // max(1, teams))
    per_round = share * (stages + 3) + 4 + len(program.phase2_stages)
    most = TIMELINE_MAX_BYTES // (4 * TIMELINE_WORDS * max(1, teams))
    return int(max(TIMELINE_MIN_EVENTS, min(most, per_round * TIMELINE_ROUNDS)))


def run(compiled, params=None, inputs: list[dict] | None = None, config: LaunchConfig | None = None,
        mode: str = "deterministic", timeout: float = 120.0, grid: int | None = None,
        team_warps: int | None = None, timeline: bool = False, team_blocks: int | None = None) -> RunResult:
    """Run a pipeline on the GPU. Modes: the persistent mega-kernel (`deterministic`,
    `fast`), or the baselines built from the same stage code: `host-loop` (a kernel
    per stage per round, host sync and flag read-back each round) and `graph`
    (one round captured as a CUDA graph, replayed until done). With `timeline` (the
    mega-kernel only) the kernel is built with its timeline, and result.extra["timeline"]
    holds what it recorded (TimelineBuffers)."""
    import cupy

    if mode not in MODES:
        raise ValueError(f"unknown mode '{mode}' ({', '.join(MODES)})")
    if timeline and mode not in ("deterministic", "fast"):
        raise ValueError(f"a timeline records the mega-kernel (deterministic or fast), not '{mode}'")
    module = compiled.sim_module()
    config = config or LaunchConfig()
    config.validate()  # never truncated to int32
    p = params if isinstance(params, module.Params) else make_params(module, params)
    inputs = inputs if inputs is not None else [{}]
    n = len(inputs)
    req_dtype = dtype_from_layout(module.REQUEST_LAYOUT)
    shared_dtype = dtype_from_layout(module.SHARED_LAYOUT)
    reqs_host = to_array(make_requests(module, p, inputs), module.REQUEST_LAYOUT, req_dtype)
    shared_host = to_array([module.init_shared(p)], module.SHARED_LAYOUT, shared_dtype)
    tensors = device_tensors(cupy, module, p)

    team = team_warps if team_warps is not None else team_warps_default()
    if team is None:
        team = choose_team_warps(compiled.program, mode, min(config.max_active, n),
                                 cupy.cuda.Device().attributes["MultiProcessorCount"])
    if team not in TEAM_WARPS:
        raise ValueError(f"team_warps = {team!r}: give one of {', '.join(map(str, TEAM_WARPS))}")
    if team > 1 and mode != "deterministic":
        raise ValueError(f"a team of {team} warps per request runs in deterministic mode only, not '{mode}'")
    if team > 1 and request_mode(req_dtype.itemsize, team) == 2:
        raise ValueError("a team of several warps needs XL_REQUEST_IN_SHARED 0 or 1, not 2")
    sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
    blocks_per_team = team_blocks if team_blocks is not None else team_blocks_default()
    if blocks_per_team is None:
        blocks_per_team = choose_team_blocks(compiled.program, team, mode, min(config.max_active, n), sms,
                                             req_dtype.itemsize)
        if grid is not None and grid % blocks_per_team:
            blocks_per_team = 1  # the caller's grid decides
    if blocks_per_team not in TEAM_BLOCKS:
        raise ValueError(f"team_blocks = {blocks_per_team!r}: give one of {', '.join(map(str, TEAM_BLOCKS))}")
    if blocks_per_team > 1 and (team == 1 or mode != "deterministic"):
        raise ValueError(f"a team of {blocks_per_team} blocks needs a team of several warps per block and "
                         f"deterministic mode (here {team} warp(s), '{mode}')")
    if blocks_per_team > 1 and request_mode(req_dtype.itemsize, team, blocks_per_team) != 1:
        raise ValueError("a team of several blocks keeps a copy of its request in each block's shared memory "
                         "(XL_REQUEST_IN_SHARED 1)")
    if blocks_per_team > 1 and req_dtype.itemsize > CLUSTER_REQUEST_MAX:
        raise ValueError(f"a request of {req_dtype.itemsize} bytes does not fit a block's shared memory "
                         f"({CLUSTER_REQUEST_MAX}), where a team of several blocks keeps its copies: use one block")
    cu = compile_module(compiled, team, timeline, blocks_per_team)
    persistent = mode in ("deterministic", "fast")
    kernel = cu.get_function({"deterministic": "xl_run_deterministic", "fast": "xl_run_fast"}.get(mode, "xl_step_begin"))
    shared_bytes = request_shared_bytes(req_dtype.itemsize, team, blocks_per_team)
    _set_dynamic_shared(kernel, shared_bytes)
    # Measured on an H200 (docs/benchmarks.md): packing a batch of 32 into one block of
    # 32 warps halves an empty round (no grid barrier) but slows real rounds by ~12%,
    # since 32 requests then share one SM; so blocks stay at 4 warps. A team of several
    # warps is a block serving one request.
    threads = THREADS_PER_BLOCK if team == 1 else 32 * team
    useful = config.max_active if mode != "fast" else n
    serves = mode == "fast" and bool(compiled.program.phase2_stages)  # block 0 serves phase 2 (epochs)
    if serves and grid is not None and grid < 2:
        raise ValueError(f"grid = {grid}: fast mode runs this program's phase 2 in block 0, and its requests in "
                         "the other blocks: give 2 blocks or more")
    if blocks_per_team > 1:  # a cluster per request of the batch, as many as are resident at once
        if grid is not None and grid % blocks_per_team:
            raise ValueError(f"grid = {grid}: give a multiple of the team's {blocks_per_team} blocks")
        blocks = grid or blocks_per_team * min(max(1, useful), max_clusters(kernel, threads, shared_bytes,
                                                                           blocks_per_team, sms))
    else:
        blocks = grid or grid_size(kernel, shared_bytes, useful * team if team > 1 else useful, threads)
    if serves:
        blocks = max(2, blocks)
    own_phase2 = phase2_team(team, blocks_per_team)
    if own_phase2:  # one team more, for phase 2 (unless the caller's grid has it)
        if grid is not None and grid < 2 * blocks_per_team:
            raise ValueError(f"grid = {grid}: phase 2's own team (XLGEN_PHASE2_TEAM) needs a second team of "
                             f"{blocks_per_team} block(s) for the requests")
        # (one block more in a team of one block: the grid holds one per SM and more than the batch
        # needs from 2 requests on, grid_size)
        blocks = grid or (blocks + blocks_per_team if blocks_per_team > 1 else max(2, blocks))
    width = _record_words(compiled)
    capacity = max(4096, 64 * n)  # records; a run that needs more is repeated with room for all
    overflow = 4096  # (word, slot) pairs a collective stage may note past the requests' own lists; likewise
    teams = blocks // blocks_per_team if team > 1 else blocks * threads // 32
    tl_capacity = timeline_capacity(compiled.program, teams, n, config.max_active, mode) if timeline else 0
    tl_retried = False
    flags = _MappedFlags()
    try:
        while True:
            # Everything is allocated and zeroed on the kernel's own stream: a
            # non-blocking stream does not wait for work queued on the default one.
            stream = cupy.cuda.Stream(non_blocking=True)
            with stream:
                words = collective_words(compiled.program, len(shared_host.view(np.uint32)), config, n, mode, overflow,
                                         blocks * threads // 32)
                pools = {name: cupy.zeros(dims, dtype=POOL_DTYPES[word])  # zero at every launch and retry
                         for name, _attr, word, dims in pool_table(module)}
                packed = params_array(module, p, tensors, {name: a.data.ptr for name, a in pools.items()})
                d = _Buffers(cupy, reqs_host, shared_host, packed, n, config, capacity, width, blocks * threads // 32,
                             words, overflow)
                tl_buffer = (cupy.zeros(teams * (tl_capacity * TIMELINE_WORDS + TIMELINE_HEADER_WORDS), dtype=np.uint32)
                             if timeline else None)
                stream.synchronize()
            flags.view[:] = 0
            if persistent:
                extra_args = (tl_buffer, np.uint32(tl_capacity)) if timeline else ()
                timing = _launch_persistent(cupy, kernel, d, blocks, threads, shared_bytes, n, config, capacity,
                                            flags, stream, timeout, compiled, extra_args,
                                            cooperative=blocks_per_team == 1)
            else:
                timing = _launch_stepwise(cupy, cu, compiled, d, blocks, shared_bytes, n, config, capacity, stream,
                                          timeout, use_graph=mode == "graph")
            count = int(d.count.get(stream=stream)[0])
            lost = int(d.coll[1].get(stream=stream))  # a collective stage's notes overflowed: run again, larger
            tl_more = 0
            if timeline:
                tl_headers = tl_buffer[teams * tl_capacity * TIMELINE_WORDS:].reshape(teams, TIMELINE_HEADER_WORDS)
                tl_tried = int(tl_headers[:, 0].max().get(stream=stream))
                if tl_tried > tl_capacity and teams * tl_tried * TIMELINE_WORDS * 4 <= TIMELINE_MAX_BYTES \
                        and not tl_retried:
                    tl_more = tl_tried  # once: a run that still overflows says so (TimelineBuffers.dropped)
            if count <= capacity and not lost and not tl_more:
                break
            capacity = max(capacity, count)
            overflow *= 4 if lost else 1
            if tl_more:
                tl_capacity, tl_retried = tl_more, True
        ctl = d.ctl.get()
        table = d.records[:count].get()
        order = np.argsort(table[:, 0], kind="stable")
        reqs_out = d.reqs.get().view(req_dtype).reshape(n)
        shared_out = d.shared.get().view(shared_dtype).reshape(1)
        pools_out = {name: a.get(stream=stream) for name, a in pools.items()}
        rounds = int(ctl.view(np.int32)[4])
        timing.barriers = int(ctl[10]) | (int(ctl[11]) << 32)
        stamps = d.round_end_ns[: min(rounds + 1, d.round_cap)].get()
        if timeline:
            host = tl_buffer.get()
            split = teams * tl_capacity * TIMELINE_WORDS
            tl = TimelineBuffers(host[:split].reshape(teams, tl_capacity, TIMELINE_WORDS),
                                 host[split:].reshape(teams, TIMELINE_HEADER_WORDS), tl_capacity, mode, team,
                                 blocks, threads, blocks_per_team, own_phase2)
    finally:
        flags.close()
    result = RunResult(records=table[order], requests=reqs_out, shared=shared_out, rounds=rounds,
                       backend=f"gpu-{mode}", pools=pools_out)
    result.extra["timing"] = timing
    result.extra["team_warps"] = team
    result.extra["team_blocks"] = blocks_per_team
    result.extra["phase2_team"] = own_phase2
    # Device time at which round k ended, relative to the start (index 0): traces
    # carry rounds, so a traced event in round k happened by round_end_ns[k + 1].
    result.extra["round_end_ns"] = (stamps.astype(np.int64) - int(stamps[0])) if len(stamps) else stamps
    if timeline:
        result.extra["timeline"] = tl
    return result


# Tensors in device memory, uploaded once per host buffer and kept while it is cached: keyed by
# the host memory's address and size (bind() gives a fresh view of the same memory at every
# launch). Weights are read-only; to launch with other values, pass other arrays.
_DEVICE_TENSORS: dict[tuple[int, int], tuple[object, object]] = {}


def device_tensors(cupy, module, p) -> dict[str, int]:
    """Each tensor's device address, uploading a host buffer the first time it is launched with."""
    addresses = {}
    for name in getattr(module.Params, "TENSORS", {}):
        host = getattr(p, py(name))
        key = (host.__array_interface__["data"][0], host.nbytes)
        entry = _DEVICE_TENSORS.get(key)
        if entry is None:
            if len(_DEVICE_TENSORS) >= 64:  # weights of many models: forget the oldest
                _DEVICE_TENSORS.pop(next(iter(_DEVICE_TENSORS)))
            entry = (host, cupy.asarray(host))  # holding `host` keeps its memory from being reused
            _DEVICE_TENSORS[key] = entry
        addresses[name] = entry[1].data.ptr
    return addresses


class _Buffers:
    """The device buffers of one run (allocated on the current stream)."""

    def __init__(self, cupy, reqs_host, shared_host, packed, n, config, capacity, width, warps, coll_words,
                 coll_overflow):
        self.reqs = cupy.asarray(reqs_host.view(np.uint32))
        self.shared = cupy.asarray(shared_host.view(np.uint32))
        # Params by value (the kernels' __grid_constant__ parameter): CuPy passes an array of one
        # element by value, and the driver copies the parameter's size from it.
        self.params = np.frombuffer(packed.tobytes(), dtype=np.dtype((np.void, packed.nbytes)))
        # XlControl: 12 words of counters, then the round_end_ns pointer and its capacity.
        self.round_cap = max(2, min(config.max_rounds + 1, 1 << 20))
        self.round_end_ns = cupy.zeros(self.round_cap, dtype=np.uint64)
        ctl = np.zeros(16, dtype=np.uint32)
        ctl[12:14] = np.array([self.round_end_ns.data.ptr], dtype=np.uint64).view(np.uint32)
        ctl[14] = self.round_cap
        self.ctl = cupy.asarray(ctl)
        self.list_len = max(1, min(config.max_active, n))
        self.active = cupy.zeros(2 * self.list_len, dtype=np.int32)  # this round's and the next round's lists
        self.keep = cupy.zeros(self.list_len, dtype=np.int8)
        self.records = cupy.zeros((capacity, width), dtype=np.uint32)
        self.count = cupy.zeros(1, dtype=np.uint64)
        self.where = cupy.full((warps, 4), -1, dtype=np.int32)
        self.coll = cupy.zeros(coll_words, dtype=np.uint32)  # collective stages' shadow and scratch (XlColl)
        self.coll[0] = coll_overflow  # header[0]: the overflow list's capacity


NOTE_CAP = 256  # XL_NOTE_CAP: words a request notes in its own list per collective stage
GRID_MAX_BLOCKS = 1024  # XL_GRID_MAX_BLOCKS: the largest grid that runs phase 2 over every block
COLL_WIDTH = ir.COLLECTIVE_GROUP_MAX  # XL_COLL_WIDTH: collectives combined in one pass at most
GRID_WORDS = 2 + 4 * COLL_WIDTH * GRID_MAX_BLOCKS  # XL_GRID_WORDS: its barrier and the blocks' parts


def collective_words(program, shared_words: int, config, n: int, mode: str, overflow: int, warps: int = 1) -> int:
    """Words of the XlColl buffer (xl_coll_carve and xl_coll_words in the kernel, alike), and in
    fast mode with phase-2 stages, fast mode's epochs after it (xl_epoch_words): an epoch holds
    at most a request per warp of the grid (`warps`)."""
    slots = warps if mode == "fast" else max(1, min(config.max_active, n))
    words = 4
    if any(s.is_collective for s in program.stages):
        per_slot = 3 + 2 * COLL_WIDTH + NOTE_CAP + collective_frame_words(program)
        words = 4 + 3 * shared_words + per_slot * slots + 2 * overflow + GRID_WORDS
    if mode == "fast" and program.phase2_stages:
        words += epoch_words(slots, n)
    return words


def epoch_words(slots: int, n: int) -> int:
    """Fast mode's epochs (XlEpochs, xl_epoch_words): per slot an id, a round and a keep flag; per
    request a bit, a state and a round."""
    return 3 * slots + (n + 31) // 32 + 2 * n


def _launch_persistent(cupy, kernel, d, blocks, threads, shared_bytes, n, config, capacity, flags, stream, timeout,
                       compiled, extra_args=(), cooperative=True):
    # A cooperative launch guarantees that every block is resident (grid barriers). The driver
    # refuses one for a kernel of clusters (__cluster_dims__); its grid is sized within the
    # resident clusters instead (max_clusters).
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    t0 = time.perf_counter()
    with stream:
        start.record(stream)
        kernel((blocks,), (threads,),
               (d.reqs, d.shared, d.params, np.int32(n), np.int32(config.max_active), np.int32(config.max_rounds),
                d.ctl, d.active, d.keep, d.records, np.uint64(capacity), d.count, np.uint64(flags.device_ptr),
                d.where, d.coll) + extra_args,
               shared_mem=shared_bytes, enable_cooperative_groups=cooperative)
        end.record(stream)
    _wait(end, timeout, flags, d.where, d.ctl, compiled, stream)
    wall_ms = (time.perf_counter() - t0) * 1e3
    return GpuTiming(cupy.cuda.get_elapsed_time(start, end), blocks, threads, 0, wall_ms=wall_ms, launches=1)


def _launch_stepwise(cupy, cu, compiled, d, blocks, shared_bytes, n, config, capacity, stream, timeout, use_graph):
    """The conventional loop: each round, one launch per stage, then arbiters, retire
    and admit; then the host syncs and reads the `finished` flag back."""
    program = compiled.program
    args = (d.reqs, d.shared, d.params, d.ctl, d.active, d.keep, d.records, np.uint64(capacity), d.count,
            np.int32(d.list_len), np.int32(n), np.int32(config.max_active), np.int32(config.max_rounds), d.where, d.coll)
    stage_kernels = [cu.get_function(f"xl_step_{s.name}") for s in program.per_request_stages]
    for k in stage_kernels:
        _set_dynamic_shared(k, shared_bytes)
    arbiters = cu.get_function("xl_step_arbiters") if program.phase2_stages else None
    retire, admit = cu.get_function("xl_step_retire"), cu.get_function("xl_step_admit")
    retire_blocks = -(-d.list_len // 128)

    def one_round():
        for k in stage_kernels:
            k((blocks,), (THREADS_PER_BLOCK,), args, shared_mem=shared_bytes)
        if arbiters is not None:
            arbiters((1,), (THREADS_PER_BLOCK,), args)  # phase 2: one block, as in the mega-kernel
        retire((retire_blocks,), (128,), args)
        admit((1,), (128,), args)

    per_round = len(stage_kernels) + (arbiters is not None) + 2
    finished = d.ctl[5:7]  # finished, aborted
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    deadline = time.monotonic() + timeout
    graph = None
    with stream:
        if use_graph:
            stream.begin_capture()
            one_round()
            graph = stream.end_capture()
        t0 = time.perf_counter()
        start.record(stream)
        cu.get_function("xl_step_begin")((1,), (128,), args)
        launches, rounds = 1, 0
        done = bool(finished.get(stream=stream)[0])  # an empty workload is finished at once
        while not done:
            if graph is not None:
                graph.launch(stream)
                launches += 1
            else:
                one_round()
                launches += per_round
            rounds += 1
            done = bool(finished.get(stream=stream)[0])  # a sync and a read-back per round
            if not done and time.monotonic() > deadline:
                raise HangError(f"the {'graph' if use_graph else 'host'} loop did not finish within {timeout:.1f} s "
                                f"({rounds} rounds)")
        end.record(stream)
        end.synchronize()
        wall_ms = (time.perf_counter() - t0) * 1e3
    return GpuTiming(cupy.cuda.get_elapsed_time(start, end), blocks, THREADS_PER_BLOCK, 0, wall_ms=wall_ms,
                     launches=launches)


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
