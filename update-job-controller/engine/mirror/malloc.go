package mirror

// #include <malloc.h>
//
// static void tk_limit_arenas(int n) {
// #ifdef M_ARENA_MAX
// 	mallopt(M_ARENA_MAX, n);
// #endif
// }
//
// static void tk_trim(void) {
// #ifdef __GLIBC__
// 	malloc_trim(0);
// #endif
// }
import "C"

import "os"

// libgit2 allocates with the C library's malloc, on whichever thread a
// cgo call runs; Go moves goroutines between threads, and glibc gives
// each thread that contends an arena of its own, up to eight per core,
// each keeping what was freed in it. A clone of 10,000 files takes about
// 13 MiB for a moment (the indexer resolving deltas), a filtered
// checkout about 12 (the packs' delta base cache), and each arena they
// ran in kept its share: the update-job-controller's peak RSS in
// BenchmarkChainFirstRun/10k was 7 MiB lower with one arena (one run
// each, MALLOC_ARENA_MAX=1 against none). Two arenas,
// not one, leave two jobs on two cores their own.
//
// MALLOC_ARENA_MAX in the environment is the operator's and wins.
const mallocArenas = 2

func limitArenas() {
	if os.Getenv("MALLOC_ARENA_MAX") == "" {
		C.tk_limit_arenas(C.int(mallocArenas))
	}
}

// giveBackFreed returns the C heap's free pages to the system. What a job
// allocated in libgit2 is freed with its repository handle, but glibc
// gives back only the top of each heap, so the free pages in between
// stay resident until something reuses them: 12.7 MiB of 27.4 after a
// clone and filtered checkout of 10,000 files. It runs once a job is done
// with its mirror, off the way to the push.
func giveBackFreed() { C.tk_trim() }
