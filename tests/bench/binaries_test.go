package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"toolkit.dev/image-toolkit/tests/internal/localenv"
)

// binDir is the directory of the binaries a benchmark runs, bin/ unless
// $IMAGE_TOOLKIT_BIN names another, after checking that bin/'s were built
// from the tree as it is: make bench builds them first, but a benchmark
// run alone with go test does not, and a change measured with the
// binaries of an earlier commit measures nothing (a session once reported
// figures of code it had not built). The check is the version make build
// stamps, git describe --dirty: it cannot tell one uncommitted change from
// another, so commit before measuring.
func binDir(b *testing.B, root string) string {
	b.Helper()
	dir := localenv.BinDir(root)
	if os.Getenv("IMAGE_TOOLKIT_BIN") != "" {
		return dir
	}
	out, err := exec.Command("git", "-C", root, "describe", "--tags", "--always", "--dirty").Output()
	if err != nil {
		b.Fatalf("git describe: %v", err)
	}
	tree := strings.TrimSpace(string(out))
	for _, name := range append([]string{"tk-image"}, localenv.Controllers...) {
		flag := "--version"
		if name == "tk-image" {
			flag = "version"
		}
		got, err := exec.Command(filepath.Join(dir, name), flag).Output()
		if err != nil {
			b.Fatalf("%s %s: %v (run make build)", filepath.Join(dir, name), flag, err)
		}
		if f := strings.Fields(string(got)); len(f) < 2 || f[1] != tree {
			b.Fatalf("%s is %q, the tree is %s: run make build", filepath.Join(dir, name), strings.TrimSpace(strings.SplitN(string(got), "\n", 2)[0]), tree)
		}
	}
	return dir
}
