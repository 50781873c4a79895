// Package version holds the build's version, set at link time with
// -ldflags "-X toolkit.dev/image-toolkit/pkg/version.Version=...".
package version

import (
	"fmt"
	"runtime"
)

// Version of the build; "dev" for builds without ldflags.
var Version = "dev"

// String describes the build for --version output.
func String(binary string) string {
	return fmt.Sprintf("%s %s (%s, %s/%s)", binary, Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
