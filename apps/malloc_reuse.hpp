#pragma once
// Training frees and allocates the same large tensors every microbatch. By
// default glibc maps blocks above a moving threshold afresh and returns the
// heap's freed top to the kernel, so each step faults its tensors in again,
// 4 KiB at a time: a profile of `--role local` at d_model 1024 had 21% of
// its time in the kernel's page-fault path. Keeping freed memory in the heap
// (blocks up to glibc's largest threshold, 32 MiB, from the heap; the heap
// never trimmed) measured 336 -> 420 tokens/s in fp32 and 435 -> 823 in bf16
// there (docs/benchmarks.md, bench_torch.sh: "Freed memory kept"). The price: a process keeps its
// peak heap until it exits.

#include <malloc.h>

namespace swarm {

inline void keep_freed_memory() {
  ::mallopt(M_MMAP_THRESHOLD, 32 << 20);  // the largest glibc accepts on 64-bit
  ::mallopt(M_TRIM_THRESHOLD, 1 << 30);   // int: 1 GiB of free heap top kept (in practice: all)
}

}  // namespace swarm
