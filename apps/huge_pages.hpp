#pragma once
// glibc maps every buffer of 32 MiB or more afresh and faults it in 4 KiB
// pages; a 64 MiB transfer spent more time there than copying bytes
// (scripts/bench_transfer.sh, 64 MiB requests: 0.36 of raw TCP without huge
// pages, 0.84 with). glibc >= 2.35 backs its own mappings with transparent
// huge pages when GLIBC_TUNABLES holds glibc.malloc.hugetlb=1, read only when a
// process starts. The cluster launcher sets it for its children; a process
// cannot set it for itself without starting again (which costs a second
// libtorch load: too slow for the swarm's many processes, fine for a benchmark).

#include <cstdlib>
#include <string>

#include <unistd.h>

namespace swarm {

/// Adds glibc.malloc.hugetlb=1 to GLIBC_TUNABLES for processes started from
/// now on; false when it was there already.
inline bool want_huge_pages() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  const std::string current = tunables ? tunables : "";
  if (current.find("glibc.malloc.hugetlb") != std::string::npos)
    return false;
  const std::string wanted = current.empty() ? "glibc.malloc.hugetlb=1" : current + ":glibc.malloc.hugetlb=1";
  ::setenv("GLIBC_TUNABLES", wanted.c_str(), 1);
  return true;
}

/// Starts this program again with huge pages, unless it has them (benchmarks).
inline void restart_with_huge_pages(char** argv) {
  if (want_huge_pages())
    ::execv("/proc/self/exe", argv);  // on failure: carry on without
}

}  // namespace swarm
