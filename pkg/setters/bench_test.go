package setters

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

const deployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: app-%[1]d
  namespace: team-%[2]d
  labels:
    app.kubernetes.io/name: app-%[1]d
spec:
  replicas: 2
  selector:
    matchLabels:
      app.kubernetes.io/name: app-%[1]d
  template:
    metadata:
      labels:
        app.kubernetes.io/name: app-%[1]d
    spec:
      containers:
      - name: app
        image: ghcr.io/org/app-%[1]d:1.0.0%[3]s
        ports:
        - containerPort: 8080
        resources:
          requests:
            cpu: 10m
            memory: 32Mi
`

// makeTree writes files YAML files in 100 directories; every
// (files/markers)th file has a marker.
func makeTree(tb testing.TB, files, markers int) string {
	tb.Helper()
	dir := tb.TempDir()
	for i := range files {
		sub := filepath.Join(dir, fmt.Sprintf("team-%02d", i%100))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			tb.Fatal(err)
		}
		marker := ""
		if i%(files/markers) == 0 {
			marker = ` # {"$imagepolicy": "apps:app"}`
		}
		body := fmt.Sprintf(deployment, i, i%100, marker)
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("app-%05d.yaml", i)), []byte(body), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}

// BenchmarkUpdateDir: 10,000 files, 100 markers; every iteration moves all
// 100 markers to a new tag, so each run parses, rewrites and writes them.
func BenchmarkUpdateDir(b *testing.B) {
	dir := makeTree(b, 10000, 100)
	moveAll(b, dir)
}

// BenchmarkUpdateDirFormats: 10,000 files of the formats besides YAML (a
// Dockerfile, a .env, a Terraform and a TOML file in each of 2,500
// directories), 100 of them marked; every iteration moves all 100 to a new
// tag, as BenchmarkUpdateDir does for YAML.
func BenchmarkUpdateDirFormats(b *testing.B) {
	dir := b.TempDir()
	for i := range 2500 {
		sub := filepath.Join(dir, fmt.Sprintf("team-%02d", i%100), fmt.Sprintf("app-%04d", i))
		if err := os.MkdirAll(sub, 0o755); err != nil {
			b.Fatal(err)
		}
		marker := ""
		if i%100 == 0 {
			marker = `{"$imagepolicy": "apps:app"}`
		}
		files := map[string]string{
			"Dockerfile": fmt.Sprintf("# syntax=docker/dockerfile:1\nFROM golang:1.26 AS build\nWORKDIR /src\nCOPY . .\nRUN go build -o /app .\n# %s\nFROM ghcr.io/org/app-%d:1.0.0\nCOPY --from=build /app /app\nENTRYPOINT [\"/app\"]\n", marker, i),
			".env":       fmt.Sprintf("LOG_LEVEL=info\nPORT=8080\nAPP_IMAGE=ghcr.io/org/app-%d:1.0.0 # %s\n", i, marker),
			"main.tf":    fmt.Sprintf("resource \"aws_ecs_task_definition\" \"app\" {\n  family = \"app-%d\"\n  container {\n    name  = \"app\"\n    image = \"ghcr.io/org/app-%d:1.0.0\" # %s\n  }\n}\n", i, i, marker),
			"fly.toml":   fmt.Sprintf("app = \"app-%d\"\n\n[build]\n  image = \"ghcr.io/org/app-%d:1.0.0\" # %s\n", i, i, marker),
		}
		for name, body := range files {
			if err := os.WriteFile(filepath.Join(sub, name), []byte(body), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	moveAll(b, dir)
}

// moveAll moves dir's 100 markers of apps:app to a new tag at every
// iteration.
func moveAll(b *testing.B, dir string) {
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		i++
		pol := Policies{"apps:app": {Name: "ghcr.io/org/app", Tag: fmt.Sprintf("2.0.%d", i)}}
		res, err := UpdateDir(dir, pol, Options{})
		if err != nil {
			b.Fatal(err)
		}
		if n := len(res.Files); n != 100 {
			b.Fatalf("%d files changed, want 100", n)
		}
	}
}
