package mirror

// #cgo pkg-config: libgit2
// #include <git2.h>
import "C"

import (
	"fmt"

	git2go "github.com/libgit2/git2go/v34"
)

// LibGit2Version reports the libgit2 this binary is linked against and the
// transports it was built with. Its HTTPS and SSH transports are not used
// (ours carry a context: transport.go); the report still says what the
// library is. git2go has no call for the run-time version, so ask libgit2
// itself.
func LibGit2Version() string {
	var major, minor, rev C.int
	C.git_libgit2_version(&major, &minor, &rev)
	f := git2go.Features()
	return fmt.Sprintf("libgit2 %d.%d.%d (https: %t, ssh: %t, threads: %t)", major, minor, rev,
		f&git2go.FeatureHTTPS != 0, f&git2go.FeatureSSH != 0, f&git2go.FeatureThreads != 0)
}
