package engine

import (
	"os"
	"testing"

	"toolkit.dev/image-toolkit/update-job-controller/forges"
)

// TestMain registers the built-in forges, as the engine's front ends do.
func TestMain(m *testing.M) {
	forges.Register()
	os.Exit(m.Run())
}
