package setters

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// Options tune UpdateDir.
type Options struct {
	// DryRun computes the result without writing files.
	DryRun bool
	// Sites mark scalars of files (by path relative to dir, as
	// ManifestFiles gives them) as if they carried markers: a repository's
	// discovered images, updated without markers.
	Sites map[string][]Site
	// Keep, when set, is asked before a marked value is changed to value,
	// with the site as the file has it (its path relative to dir); true
	// leaves the value as it is, and the change out of the result. It is
	// how a person's hand edit wins over a policy (the job's holds). It
	// may be called from several goroutines at once.
	Keep func(site MarkerSite, value string) bool
	// Named are values set by a JSON Pointer in JSON files, by path
	// relative to dir (NamedFiles): files that cannot carry a marker. A
	// named file that does not exist, a pointer to no string, and a
	// policy not among those given are reported.
	Named map[string][]Named
}

// needle is what a file must contain to be parsed at all: most files of a
// repository have no marker, and a byte search is far cheaper than YAML.
var needle = []byte(`"$imagepolicy"`)

// MayHaveMarkers reports whether a file could hold a marker; files for
// which it is false are never changed by UpdateDir, so a caller preparing a
// directory for it may leave them out.
func MayHaveMarkers(data []byte) bool { return bytes.Contains(data, needle) }

// UpdateDir applies the policies to the YAML files under dir (files named
// *.yaml, *.yml or Kustomization) and to the files of Formats (Dockerfiles,
// .env files), in any subdirectory but .git. Symbolic
// links are followed only while they stay inside dir. A file that does not
// parse is reported in Result.Problems and the others are still updated;
// files without a change are not written.
func UpdateDir(dir string, policies Policies, opts Options) (*Result, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()

	files, problems, err := candidates(root, isTarget)
	if err != nil {
		return nil, err
	}
	// Files without markers are read for what is named or discovered in
	// them (a JSON document's values).
	for p := range opts.Named {
		if !slices.Contains(files, p) {
			files = append(files, p)
		}
	}
	for p := range opts.Sites {
		if !slices.Contains(files, p) {
			files = append(files, p)
		}
	}
	sort.Strings(files)

	type outcome struct {
		file     *meta.FileResult
		markers  []MarkerSite
		problems []Problem
	}
	outcomes := make([]outcome, len(files))
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(runtime.GOMAXPROCS(0)*2, max(len(files), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f, ms, ps := updateFile(root, files[i], policies, opts)
				outcomes[i] = outcome{f, ms, ps}
			}
		}()
	}
	for i := range files {
		next <- i
	}
	close(next)
	wg.Wait()

	res := &Result{Files: []meta.FileResult{}, Problems: problems}
	for _, o := range outcomes {
		if o.file != nil {
			res.Files = append(res.Files, *o.file)
		}
		res.Markers = append(res.Markers, o.markers...)
		res.Problems = append(res.Problems, o.problems...)
	}
	sort.Slice(res.Files, func(i, j int) bool { return res.Files[i].Path < res.Files[j].Path })
	// Each file's markers are in line order already.
	sort.SliceStable(res.Markers, func(i, j int) bool { return res.Markers[i].Path < res.Markers[j].Path })
	sort.SliceStable(res.Problems, func(i, j int) bool { return res.Problems[i].Path < res.Problems[j].Path })
	return res, nil
}

func isManifest(name string) bool {
	return strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml") || name == "Kustomization"
}

// isTarget tells the files UpdateDir reads: manifests, and the files of
// Formats.
func isTarget(name string) bool {
	f := FormatOf(name)
	return isManifest(name) || (f != nil && f.NoMarkers == "")
}

// candidates walks the root for the files want names. A symlink to a file counts
// when it resolves inside the root and to a file not otherwise walked;
// symlinks to directories are not followed (their targets inside the root
// are walked anyway).
func candidates(root *os.Root, want func(name string) bool) ([]string, []Problem, error) {
	var files, links []string
	var problems []Problem
	err := fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == "." {
				return err
			}
			problems = append(problems, Problem{Path: p, Err: err})
			return nil
		}
		switch {
		case d.IsDir():
			if d.Name() == ".git" {
				return fs.SkipDir
			}
		case !want(d.Name()):
		case d.Type()&fs.ModeSymlink != 0:
			links = append(links, p)
		case d.Type().IsRegular():
			files = append(files, p)
		}
		return nil
	})
	if err != nil || len(links) == 0 {
		return files, problems, err
	}

	seen := map[[2]uint64]bool{}
	for _, f := range files {
		if id, ok := fileID(root, f); ok {
			seen[id] = true
		}
	}
	for _, l := range links {
		// root.Stat follows the link and fails when it leaves the root.
		info, err := root.Stat(l)
		if err != nil {
			problems = append(problems, Problem{Path: l, Err: fmt.Errorf("symlink not followed: %w", err)})
			continue
		}
		if !info.Mode().IsRegular() {
			continue
		}
		if id, ok := statID(info); ok {
			if seen[id] {
				continue
			}
			seen[id] = true
		}
		files = append(files, l)
	}
	return files, problems, nil
}

func fileID(root *os.Root, p string) ([2]uint64, bool) {
	info, err := root.Stat(p)
	if err != nil {
		return [2]uint64{}, false
	}
	return statID(info)
}

func statID(info fs.FileInfo) ([2]uint64, bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return [2]uint64{}, false
	}
	return [2]uint64{uint64(st.Dev), uint64(st.Ino)}, true
}

// updateFile updates one file; it returns nil when nothing changed, and
// the markers it found.
func updateFile(root *os.Root, p string, policies Policies, opts Options) (*meta.FileResult, []MarkerSite, []Problem) {
	named, isNamed := opts.Named[p]
	data, err := root.ReadFile(p)
	if isNamed && errors.Is(err, fs.ErrNotExist) {
		return nil, nil, []Problem{{Path: p, Err: errors.New("no such file to set the named values of")}}
	}
	if err != nil {
		return nil, nil, []Problem{{Path: p, Err: err}}
	}
	sites := opts.Sites[p]
	if !bytes.Contains(data, needle) && len(sites) == 0 && !isNamed {
		return nil, nil, nil
	}
	clean := path.Clean(p)
	var keep func(MarkerSite, string) bool
	if opts.Keep != nil {
		keep = func(m MarkerSite, value string) bool {
			m.Path = clean
			return opts.Keep(m, value)
		}
	}
	var out []byte
	var objs []meta.ObjectResult
	var skipped []error
	var markers []MarkerSite
	switch f := FormatOf(p); {
	case isNamed:
		for _, n := range named {
			if _, ok := policies[n.Marker.Policy]; !ok {
				skipped = append(skipped, fmt.Errorf("%s: no value is given for policy %s", n.Pointer, n.Marker.Policy))
			}
		}
		var more []error
		out, objs, more, markers, err = updateFormat(namedFormat(named), data, policies, keep)
		skipped = append(skipped, more...)
	case f != nil:
		out, objs, skipped, markers, err = updateFormat(f, data, policies, keep, sites...)
	default:
		out, objs, skipped, _, markers, err = update(data, policies, keep, sites...)
	}
	for i := range markers {
		markers[i].Path = clean
	}
	var problems []Problem
	for _, s := range skipped {
		problems = append(problems, Problem{Path: p, Err: s})
	}
	if err != nil {
		return nil, markers, append(problems, Problem{Path: p, Err: err})
	}
	if len(objs) == 0 {
		return nil, markers, problems
	}
	if !opts.DryRun {
		info, err := root.Stat(p)
		if err != nil {
			return nil, markers, append(problems, Problem{Path: p, Err: err})
		}
		if err := root.WriteFile(p, out, info.Mode().Perm()); err != nil {
			return nil, markers, append(problems, Problem{Path: p, Err: fmt.Errorf("writing: %w", err)})
		}
	}
	return &meta.FileResult{Path: clean, Objects: objs}, markers, problems
}

// DiscoverFiles lists the files pkg/discover reads under root: the YAML
// files, Dockerfiles and HCL, TOML, .env and JSON files, and
// the paths it could not read.
func DiscoverFiles(root *os.Root) ([]string, []Problem, error) {
	return candidates(root, func(name string) bool {
		f := FormatOf(name)
		return isManifest(name) || IsDockerfile(name) || (f != nil && f.Values != nil)
	})
}

// ManifestFiles lists the YAML files UpdateDir reads under root, and the
// paths it could not read.
func ManifestFiles(root *os.Root) ([]string, []Problem, error) { return candidates(root, isManifest) }
