package discover

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// writeFleet writes files Deployments in the shape of the benchmarks'
// fleet repository (tests/internal/chain Grow), their images spread over
// distinct repositories.
func writeFleet(b *testing.B, files, distinct int) string {
	b.Helper()
	dir := b.TempDir()
	for i := range files {
		p := filepath.Join(dir, "clusters/prod/apps", fmt.Sprintf("team-%02d", i%100), fmt.Sprintf("app-%05d.yaml", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		body := fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: app-%05d
  namespace: team-%02d
spec:
  replicas: 2
  template:
    spec:
      containers:
      - name: app
        image: registry.example.com/apps/app-%04d:6.3.0
        ports:
        - containerPort: 8080
`, i, i%100, i%distinct)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return dir
}

// BenchmarkDir measures discovery of a whole repository: 10,000 files
// (the benchmarks' fleet, one image), and 5,000 files naming 500 distinct
// images. Reports the images found, which is what a cycle scans: one
// ImageRepository per distinct image, however many files name it.
//
//	go test -run '^$' -bench BenchmarkDir ./pkg/discover/
func BenchmarkDir(b *testing.B) {
	for _, c := range []struct{ files, distinct int }{{10000, 1}, {5000, 500}} {
		b.Run(fmt.Sprintf("%dfiles-%dimages", c.files, c.distinct), func(b *testing.B) {
			dir := writeFleet(b, c.files, c.distinct)
			b.ResetTimer()
			var res *Result
			for range b.N {
				var err error
				if res, err = Dir(dir); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(res.Images)), "images")
			if len(res.Images) != c.distinct {
				b.Fatalf("%d images, want %d", len(res.Images), c.distinct)
			}
		})
	}
}
