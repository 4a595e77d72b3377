// xlgen's kernel timeline (`xlgen run|bench --timeline`, docs/gpu.md "Timeline"). Included only
// by the timeline build of NAME_gpu.cu (gpu.py renders it with `timeline` on): without
// --timeline the kernel is compiled from exactly the source it always was.
//
// The buffer: for each team (a warp, or a block of XL_TEAM_WARPS warps) `cap` events of
// XL_TL_WORDS words, then each team's header of XL_TL_HEADER_WORDS words. An event: kind,
// stage, round, request, start and end (%globaltimer ns, low word first). A header: events
// the team tried to write (more than `cap`: the rest were dropped, never written past its
// slice), %smid, block, warp in the block. Thread 0 of the team writes; xlgen/tools/measure/timeline.py
// reads it.
#pragma once

enum { XL_TL_REQUEST = 1, XL_TL_STAGE = 2, XL_TL_BARRIER = 3, XL_TL_PHASE2 = 4, XL_TL_PHASE2_STAGE = 5,
       XL_TL_RETIRE = 6, XL_TL_ADMIT = 7, XL_TL_LOCK = 8 /* fast mode: waiting for an epoch */ };
constexpr int XL_TL_WORDS = 8;
constexpr int XL_TL_HEADER_WORDS = 4;
constexpr uint32_t XL_TL_NONE = 0xFFFFFFFFu;

struct XlTimeline {
    uint4* events;     // this team's slice
    uint32_t* header;  // this team's header
    uint32_t cap;
    uint32_t n;        // events tried so far
    bool writer;       // thread 0 of the team
};

// The GPU's global nanosecond clock, the same on every SM.
__device__ __forceinline__ unsigned long long xl_tl_now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ XlTimeline xl_tl_open(uint32_t* buffer, uint32_t cap, int team, int teams, bool writer,
                                                 int warp_in_block) {
    XlTimeline tl;
    tl.events = reinterpret_cast<uint4*>(buffer) + (size_t)team * cap * (XL_TL_WORDS / 4);
    tl.header = buffer + (size_t)teams * cap * XL_TL_WORDS + (size_t)team * XL_TL_HEADER_WORDS;
    tl.cap = cap;
    tl.n = 0;
    tl.writer = writer;
    if (writer) {
        unsigned int smid;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
        tl.header[0] = 0u;
        tl.header[1] = smid;
        tl.header[2] = blockIdx.x;
        tl.header[3] = (uint32_t)warp_in_block;
    }
    return tl;
}

// One event, by the team's thread 0 (the others return): two 16-byte stores and the count.
__device__ __forceinline__ void xl_tl_event(XlTimeline& tl, uint32_t kind, uint32_t stage, int32_t round,
                                            int32_t req_id, unsigned long long start, unsigned long long end) {
    if (!tl.writer) return;
    if (tl.n < tl.cap) {
        uint4* e = tl.events + (size_t)tl.n * (XL_TL_WORDS / 4);
        e[0] = make_uint4(kind, stage, (uint32_t)round, (uint32_t)req_id);
        e[1] = make_uint4((uint32_t)start, (uint32_t)(start >> 32), (uint32_t)end, (uint32_t)(end >> 32));
    }
    tl.header[0] = ++tl.n;
}
