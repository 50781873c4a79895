package mirror

// #include <malloc.h>
//
// static void tk_trim(void) {
// #ifdef __GLIBC__
// 	malloc_trim(0);
// #endif
// }
import "C"

// giveBackFreed returns the C heap's free pages to the system. libgit2
// allocates with malloc; what a job allocated (a clone's indexer, a
// filtered checkout's delta base cache, both growing with the files) is
// freed with its repository handle, but glibc gives back only the top of
// each heap, so the free pages in between stayed resident until something
// reused them: about half the C heap after a clone and filtered checkout
// of a large repository (BenchmarkChainFirstRun measures the job
// controller's RssAnon with this; docs/performance.md). It runs once
// a job is done with its mirror, after the push. (Fewer malloc arenas,
// M_ARENA_MAX, changed neither the peak nor the time there.)
func giveBackFreed() { C.tk_trim() }
