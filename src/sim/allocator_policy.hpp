#pragma once
// How the process's allocator should treat the simulator's large arrays. The simulator allocates
// and frees the same large arrays once per simulated step (ops, tasks, timings), and `plan`,
// `validate` and the periodic fold simulate many steps in a row. glibc maps every block over its
// mmap threshold afresh and unmaps it on free, so each step paid its page faults again (18 % of a
// 70B / 256-GPU `plan`; 405,000 page faults against 17,000 over the 405B / 16,384-GPU benchmark):
// keep large blocks in the heap and freed memory mapped. Called first thing by every main that
// simulates (the CLI, the benchmarks), so that what is benchmarked is what users run.
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace meshplan::sim {

inline void keep_large_blocks_mapped() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
}

}  // namespace meshplan::sim
