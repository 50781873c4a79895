// Command crash is a broken release: its container exits 1 at once, so a
// Deployment running it never becomes available and a Flux Kustomization
// that waits for it fails its health check (flux_test.go).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Println("crash: this release exits at once")
	os.Exit(1)
}
