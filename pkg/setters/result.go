package setters

import (
	"path"
	"slices"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// Problem is a file that could not be (fully) updated.
type Problem struct {
	Path string
	Err  error
}

func (p Problem) Error() string { return p.Path + ": " + p.Err.Error() }

// MarkerSite is a marker found in a file: where, and what it names.
type MarkerSite struct {
	// Path relative to the updated directory, with forward slashes.
	Path string
	// Line of the marked value, from 1; 0 when not known (UpdateNodes).
	Line   int
	Marker Marker
	// Value is the marked value as the file had it.
	Value string
}

// Result is what an update changed: files sorted by path, then objects and
// changes in document order. Only values that differ are recorded.
type Result struct {
	Files []meta.FileResult `json:"files"`
	// Problems are files not parsed, or targets not rewritten; the other
	// files are still updated.
	Problems []Problem `json:"-"`
	// Markers are all the markers found, by path and line, whether or not
	// a policy was given for them and their value changed: what tells "no
	// marker names this policy" from "already up to date".
	Markers []MarkerSite `json:"-"`
}

// Changes returns all changes, in file and document order.
func (r *Result) Changes() []meta.Change {
	var out []meta.Change
	for _, f := range r.Files {
		for _, o := range f.Objects {
			out = append(out, o.Changes...)
		}
	}
	return out
}

// Objects returns the changes per object, merged across files.
func (r *Result) Objects() map[meta.ObjectID][]meta.Change {
	out := map[meta.ObjectID][]meta.Change{}
	for _, f := range r.Files {
		for _, o := range f.Objects {
			out[o.ObjectID] = append(out[o.ObjectID], o.Changes...)
		}
	}
	return out
}

// ObjectChanges maps objects of a file to their changes.
type ObjectChanges map[meta.ObjectID][]meta.Change

// ResultV2 is the result in the shape of Flux's update.ResultV2, the
// .Changed of commit message templates: FileChanges maps file paths to their
// objects' changes; Changes and Objects flatten it.
type ResultV2 struct {
	FileChanges map[string]ObjectChanges
	result      *Result
}

// In is the result of an update that ran in dir, a directory of the
// repository, with its files named from the repository's root, as git and
// the forges' diffs name them (deploy/app.yaml for app.yaml updated under
// --path deploy): what commit messages, pull requests and tk-image print.
func (r *Result) In(dir string) *Result {
	if r == nil || dir == "" || dir == "." {
		return r
	}
	out := *r
	out.Files = make([]meta.FileResult, len(r.Files))
	for i, f := range r.Files {
		f.Path = path.Join(dir, f.Path)
		out.Files[i] = f
	}
	return &out
}

// V2 returns the template view of the result.
func (r *Result) V2() ResultV2 {
	v := ResultV2{FileChanges: map[string]ObjectChanges{}, result: r}
	for _, f := range r.Files {
		oc := ObjectChanges{}
		for _, o := range f.Objects {
			oc[o.ObjectID] = append(oc[o.ObjectID], o.Changes...)
		}
		v.FileChanges[f.Path] = oc
	}
	return v
}

// Changes returns all changes, in file and document order.
func (v ResultV2) Changes() []meta.Change {
	if v.result == nil {
		return nil
	}
	return v.result.Changes()
}

// Objects returns the changes per object, merged across files.
func (v ResultV2) Objects() map[meta.ObjectID][]meta.Change {
	if v.result == nil {
		return map[meta.ObjectID][]meta.Change{}
	}
	return v.result.Objects()
}

// Sources are the source revisions the changes bring, once each (by
// source URL and revision), in the order of the changes: what commit
// messages and pull requests list as the source changes
// (.Changed.Sources), empty when no image says where it was built from.
func (v ResultV2) Sources() []meta.ChangeSource {
	var out []meta.ChangeSource
	for _, c := range v.Changes() {
		s := c.Source
		if s == nil || s.URL == "" || s.Revision == "" {
			continue
		}
		if !slices.ContainsFunc(out, func(o meta.ChangeSource) bool { return o.URL == s.URL && o.Revision == s.Revision }) {
			out = append(out, *s)
		}
	}
	return out
}

// Approvals are the approvals of the changes' images, once each, in the
// order of the changes: what the commit's Approved-by trailers and the
// pull request name (.Changed.Approvals).
func (v ResultV2) Approvals() []meta.Approval {
	var out []meta.Approval
	for _, c := range v.Changes() {
		if a := c.Approval; a != nil && !slices.Contains(out, *a) {
			out = append(out, *a)
		}
	}
	return out
}
