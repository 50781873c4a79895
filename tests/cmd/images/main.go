// Command images writes an OCI image tarball per image-toolkit binary, and
// image-update (tk-image with the entrypoint `tk-image update --krm`, a KRM
// function image), without a container engine (see package imagebuild);
// `make images` runs it on the binaries of `make build`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"toolkit.dev/image-toolkit/tests/internal/imagebuild"
)

func main() {
	home, _ := os.UserHomeDir()
	cache := os.Getenv("IMAGE_TOOLKIT_CACHE")
	if cache == "" {
		cache = filepath.Join(home, ".cache", "image-toolkit")
	}
	var (
		o    imagebuild.Options
		only string
	)
	flag.StringVar(&o.BinDir, "bin", "bin", "directory of the binaries")
	flag.StringVar(&o.OutDir, "out", "bin/images", "directory of the image tarballs")
	flag.StringVar(&o.CacheDir, "cache", cache, "cache of downloaded Debian packages")
	flag.StringVar(&o.Repository, "repository", "ghcr.io/image-toolkit", "image name prefix")
	flag.StringVar(&o.Version, "version", "dev", "image tag and version label")
	flag.StringVar(&o.Revision, "revision", "", "git commit, for the revision label")
	flag.StringVar(&only, "only", "", "comma-separated images to build (default: all)")
	flag.Parse()
	// SOURCE_DATE_EPOCH (reproducible-builds.org): the same sources give
	// the same digests.
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			fmt.Fprintln(os.Stderr, "images: SOURCE_DATE_EPOCH:", err)
			os.Exit(2)
		}
		o.Created = time.Unix(sec, 0)
	}
	specs := imagebuild.Specs
	if only != "" {
		specs = nil
		for _, n := range strings.Split(only, ",") {
			found := false
			for _, s := range imagebuild.Specs {
				if s.Name == n {
					specs, found = append(specs, s), true
				}
			}
			if !found {
				fmt.Fprintf(os.Stderr, "images: no image %q\n", n)
				os.Exit(2)
			}
		}
	}
	o.Log = os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	results, err := imagebuild.Build(ctx, o, specs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
	for _, r := range results {
		fmt.Printf("%-28s %s  %6.1f MB compressed, %6.1f MB unpacked  %s\n", r.Name, r.Digest,
			float64(r.Size)/1e6, float64(r.Unpacked)/1e6, r.Ref)
	}
	fmt.Printf("wrote %d images to %s in %s\n", len(results), o.OutDir, time.Since(start).Round(100*time.Millisecond))
}
