/* Counts malloc calls and where they come from, for finding the allocations in a decode step.
 * An LD_PRELOAD library; with MALLOC_SITES=1 in the environment it counts every malloc (and so
 * every operator new) and, at exit, prints the total and each call site seen more than 50 times:
 * the count, then the four innermost return addresses above malloc.
 *
 *   gcc -O1 -shared -fPIC benchmarks/inference/malloc_sites.c -o /tmp/malloc_sites.so -ldl
 *   for n in 20 60; do
 *     MALLOC_SITES=1 setarch x86_64 -R env LD_PRELOAD=/tmp/malloc_sites.so \
 *       build/switchyard bench decode --model MODEL --prompt-len 32 --gen-len $n --warmup 2 \
 *       --threads 2 --stream-mib 16 --stream-repeats 1 2>&1 >/dev/null | grep -A100000 '^mallocs'
 *   done
 *
 * (total at 60 - total at 20) / 40 is the mallocs per decode step. With ASLR off (setarch -R) a
 * PIE binary loads at 0x555555554000, so `addr2line -f -C -e build/switchyard ADDR-0x555555554001`
 * names a site; sites whose counts grow by 40 x k between the runs are k per step. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SITES 65536
#define DEPTH 4

static void* (*real_malloc)(size_t);
static int counting;
static atomic_long total;
static __thread int inside;
static void* site_frames[SITES][DEPTH];
static atomic_long site_hits[SITES];
static atomic_flag site_lock = ATOMIC_FLAG_INIT;

static void Record(void) {
  void* frames[DEPTH + 2];
  int depth = backtrace(frames, DEPTH + 2);
  void* key[DEPTH] = {0};
  unsigned long hash = 0;
  for (int i = 0; i < DEPTH && i + 2 < depth; ++i) {
    key[i] = frames[i + 2]; /* frames 0 and 1: Record and malloc */
    hash = hash * 31 + (unsigned long)key[i];
  }
  while (atomic_flag_test_and_set(&site_lock)) {
  }
  for (unsigned long probe = 0, slot = hash % SITES; probe < SITES; ++probe, slot = (slot + 1) % SITES) {
    if (site_hits[slot] == 0) memcpy(site_frames[slot], key, sizeof key);
    if (!memcmp(site_frames[slot], key, sizeof key)) {
      ++site_hits[slot];
      break;
    }
  }
  atomic_flag_clear(&site_lock);
}

void* malloc(size_t bytes) {
  if (!real_malloc) real_malloc = (void* (*)(size_t))dlsym(RTLD_NEXT, "malloc");
  if (counting && !inside) {
    inside = 1;
    ++total;
    Record();
    inside = 0;
  }
  return real_malloc(bytes);
}

__attribute__((constructor)) static void Start(void) {
  void* warm[2];
  backtrace(warm, 2); /* loads libgcc's unwinder before counting starts */
  const char* on = getenv("MALLOC_SITES");
  counting = on != NULL && strcmp(on, "1") == 0;
}

__attribute__((destructor)) static void Report(void) {
  if (!counting) return;
  counting = 0;
  fprintf(stderr, "mallocs %ld\n", (long)total);
  for (int s = 0; s < SITES; ++s) {
    if (site_hits[s] <= 50) continue;
    fprintf(stderr, "%ld", (long)site_hits[s]);
    for (int i = 0; i < DEPTH; ++i) fprintf(stderr, " %p", site_frames[s][i]);
    fprintf(stderr, "\n");
  }
}
