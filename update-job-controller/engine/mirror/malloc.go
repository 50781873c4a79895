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
// allocates with malloc; what a job allocated (a clone's indexer about
// 13 MiB for a moment at 10,000 files, a filtered checkout's delta base
// cache about 12) is freed with its repository handle, but glibc gives
// back only the top of each heap, so the free pages in between stayed
// resident until something reused them: 12.7 MiB of 27.4 after a clone
// and filtered checkout of 10,000 files, and the job controller's RssAnon
// after BenchmarkChainFirstRun/10k was 40 MiB, 27 with this. It runs once
// a job is done with its mirror, after the push. (Fewer malloc arenas,
// M_ARENA_MAX, changed neither the peak nor the time there.)
func giveBackFreed() { C.tk_trim() }
