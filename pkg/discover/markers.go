package discover

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"toolkit.dev/image-toolkit/pkg/setters"
)

// Sites are the setter sites of the images, by file: each location marked
// with the policy policy names for its image (NAMESPACE:NAME), and the
// part of the image its field holds. Images policy names no policy for
// ("") are left out.
func (r *Result) Sites(policy func(Image) string) map[string][]setters.Site {
	out := map[string][]setters.Site{}
	for _, img := range r.Images {
		p := policy(img)
		if p == "" {
			continue
		}
		for _, l := range img.Locations {
			out[l.File] = append(out[l.File], setters.Site{Line: l.Line, Column: l.Column,
				Marker: setters.Marker{Policy: p, Field: l.Field}})
		}
	}
	return out
}

// WriteMarkers writes the sites' markers into the files under dir with
// setters.AddMarkers (the format's AddMarkers for the other formats), changing
// nothing else, and writes only the files
// that change (keeping their modes). It returns the files written and the
// sites it could not mark, with the reason.
func WriteMarkers(dir string, sites map[string][]setters.Site) (written []string, skipped []Skipped, err error) {
	written, _, skipped, err = rewrite(dir, sites, func(file string, data []byte, ss []setters.Site) ([]byte, []setters.Site, []error, error) {
		add := setters.AddMarkers
		if f := setters.FormatOf(file); f != nil {
			add = f.AddMarkers
		}
		out, added, notMarked, err := add(data, ss)
		if len(added) == 0 {
			out = data
		}
		return out, ss, notMarked, err
	})
	return written, skipped, err
}

// ExpandFlow rewrites in block style, with setters.ExpandFlow, each flow
// mapping under dir that holds a site, so that WriteMarkers can mark it
// (--expand-flow). It returns the files written, every site at its
// position after them, and the mappings it left alone, with the reason.
func ExpandFlow(dir string, sites map[string][]setters.Site) (written []string, moved map[string][]setters.Site, skipped []Skipped, err error) {
	return rewrite(dir, sites, func(file string, data []byte, ss []setters.Site) ([]byte, []setters.Site, []error, error) {
		if setters.FormatOf(file) != nil {
			return data, ss, nil, nil // not YAML: no flow style
		}
		out, m, _, notExpanded, err := setters.ExpandFlow(data, ss)
		return out, m, notExpanded, err
	})
}

// rewrite runs change over each file of sites under dir, in name order,
// and writes the files it changes (keeping their modes). change returns
// the file's new bytes, its sites after the change, and what it left
// alone as "line N: reason" errors.
func rewrite(dir string, sites map[string][]setters.Site,
	change func(string, []byte, []setters.Site) ([]byte, []setters.Site, []error, error)) (written []string, after map[string][]setters.Site, skipped []Skipped, err error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, nil, nil, err
	}
	defer root.Close()
	files := make([]string, 0, len(sites))
	for f := range sites {
		files = append(files, f)
	}
	slices.Sort(files)
	after = map[string][]setters.Site{}
	for f, ss := range sites {
		after[f] = ss
	}
	for _, f := range files {
		data, err := root.ReadFile(f)
		if err != nil {
			return written, after, skipped, err
		}
		out, ss, left, err := change(f, data, sites[f])
		if err != nil {
			return written, after, skipped, fmt.Errorf("%s: %w", f, err)
		}
		after[f] = ss
		for _, e := range left {
			line, reason := 0, e.Error()
			if n, err := fmt.Sscanf(reason, "line %d:", &line); n == 1 && err == nil {
				_, reason, _ = strings.Cut(reason, ": ")
			}
			skipped = append(skipped, Skipped{File: f, Line: line, Reason: reason})
		}
		if string(out) == string(data) {
			continue
		}
		info, err := root.Stat(f)
		if err != nil {
			return written, after, skipped, err
		}
		if err := root.WriteFile(f, out, info.Mode().Perm()); err != nil {
			return written, after, skipped, fmt.Errorf("writing %s: %w", f, err)
		}
		written = append(written, f)
	}
	return written, after, skipped, nil
}
