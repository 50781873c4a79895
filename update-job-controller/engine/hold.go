package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sync"
	"time"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/argocd"
	"toolkit.dev/image-toolkit/pkg/hold"
	"toolkit.dev/image-toolkit/pkg/setters"
	"toolkit.dev/image-toolkit/pkg/writeback"
	"toolkit.dev/image-toolkit/update-job-controller/engine/mirror"
)

// Hold is a marked value a run left as a person set it (pkg/hold).
type Hold struct {
	writeback.HoldKey
	// Line is the value's line in the file, from 1.
	Line int
	// Value is the held value, From the automation's value it replaced,
	// Want the policy's, which the run did not write.
	Value, From, Want string
	// Author is the commit's author, Name <email>, and Since its time.
	Author string
	Since  time.Time
	// HeldWith is, for a value left only because a member of its
	// promotion group is held, that member's policy; the commit fields
	// are empty then.
	HeldWith string
}

// holdCheck answers the setters' Keep for one plan at one checkout: a
// value is left when pkg/hold says a person set it, unless its hold is
// released. It reads the history from the mirror the run fetched: a blame
// of the value's line, and, when a person's commit changed it, of the
// same marker in that commit's parent. Only values the setters would
// change are looked at, so an automation whose files already hold its
// images blames nothing.
type holdCheck struct {
	mirror   *mirror.Mirror
	commit   mirror.Hash
	prefix   string
	email    string
	released map[writeback.HoldKey]bool
	// named are the plan's update.files, by path from the repository's
	// root (apply sets them, as it reads them): their values have no
	// marker to find in a parent.
	named map[string][]setters.Named

	// mu serializes the setters' goroutines: one libgit2 repository.
	mu    sync.Mutex
	holds []Hold
	err   error
	// seen are the answers given, by site: a second pass over the files
	// (groupKeep's) blames nothing again and reports each hold once.
	seen map[siteKey]bool
}

type siteKey struct {
	path, marker string
	line         int
}

// newHoldCheck is nil when the plan does not ask for holds.
func newHoldCheck(m *mirror.Mirror, commit mirror.Hash, p writeback.Plan) *holdCheck {
	if p.Update.Holds == nil {
		return nil
	}
	h := &holdCheck{mirror: m, commit: commit, prefix: p.Path, email: p.Commit.AuthorEmail, released: map[writeback.HoldKey]bool{}, seen: map[siteKey]bool{}}
	for _, k := range p.Update.Holds.Released {
		h.released[k] = true
	}
	return h
}

// keep is setters.Options.Keep.
func (h *holdCheck) keep(site setters.MarkerSite, want string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return true
	}
	k := siteKey{site.Path, site.Marker.String(), site.Line}
	if kept, ok := h.seen[k]; ok {
		return kept
	}
	kept := h.decide(site, want)
	if h.err == nil {
		h.seen[k] = kept
	}
	return kept
}

// decide answers keep for a site not asked about before.
func (h *holdCheck) decide(site setters.MarkerSite, want string) bool {
	held, err := h.check(site, want)
	if err != nil {
		// Not knowing whether a person set it, the value is left: the
		// run fails (retried) rather than override a person.
		h.err = err
		return true
	}
	if held == nil {
		return false
	}
	if h.released[held.HoldKey] {
		return false
	}
	h.holds = append(h.holds, *held)
	return true
}

// groupKeep is keep once a first pass (a dry run) found the plan's holds:
// a value of a promotion group (groups, by policy) with a held member is
// left too, reported as held with that member. What ran together upstream
// stays together here, also when a person holds one of it back.
func (h *holdCheck) groupKeep(groups map[string]string) func(setters.MarkerSite, string) bool {
	heldBy := map[string]string{} // group -> the first held member's policy
	for _, x := range h.holds {
		pol := hold.Policy(x.Setter)
		if g := groups[pol]; g != "" && heldBy[g] == "" {
			heldBy[g] = pol
		}
	}
	if len(heldBy) == 0 {
		return h.keep
	}
	return func(site setters.MarkerSite, want string) bool {
		if h.keep(site, want) {
			return true
		}
		pol := site.Marker.Policy
		member := heldBy[groups[pol]]
		if groups[pol] == "" || member == "" || member == pol {
			return false
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		h.holds = append(h.holds, Hold{HoldKey: writeback.HoldKey{Path: path.Join(h.prefix, site.Path), Setter: site.Marker.String()},
			Line: site.Line, Value: site.Value, Want: want, HeldWith: member})
		return true
	}
}

func (h *holdCheck) check(site setters.MarkerSite, want string) (*Hold, error) {
	file := path.Join(h.prefix, site.Path)
	return h.blame(file, site.Marker.String(), site.Line, site.Value, want, func(parent mirror.Hash) (string, int, bool, error) {
		return h.previous(file, site, parent)
	})
}

// blame says whether the value at line of file (from the repository's
// root) is held: the commit that last changed the line is a person's, and
// the value it replaced, which previous finds in that commit's parent,
// was the automation's. setter names the hold.
func (h *holdCheck) blame(file, setter string, line int, value, want string,
	previous func(parent mirror.Hash) (string, int, bool, error)) (*Hold, error) {
	last, err := h.mirror.LastChange(h.commit, file, line)
	if err != nil {
		return nil, err
	}
	seen := hold.Seen{Automation: h.email, Last: hold.Line{Commit: last.Commit, Email: last.Email}, Value: value}
	if !hold.ByAutomation(seen.Last, h.email) && !last.Parent.IsZero() {
		// A person's commit: what did it replace, and who wrote that?
		prev, line, ok, err := previous(last.Parent)
		if err != nil {
			return nil, err
		}
		if ok {
			seen.Previous, seen.HasPrevious = prev, true
			before, err := h.mirror.LastChange(last.Parent, file, line)
			if err != nil {
				return nil, err
			}
			seen.Before = hold.Line{Commit: before.Commit, Email: before.Email}
		}
	}
	if !hold.Held(seen) {
		return nil, nil
	}
	return &Hold{HoldKey: writeback.HoldKey{Path: file, Setter: setter, Commit: last.Commit},
		Line: line, Value: value, From: seen.Previous, Want: want,
		Author: fmt.Sprintf("%s <%s>", last.Name, last.Email), Since: last.When}, nil
}

// keepOverride says whether an Argo CD override file (file, from the
// repository's root, of source type typ) keeps what it sets for img, cur
// at line, instead of img: a person set it over the automation's value,
// as for a marker. The hold names the policy, and its values are image
// references, as a marker that writes the whole reference.
func (h *holdCheck) keepOverride(file, typ string, img argocd.Image, cur meta.ImageRef, line int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return true
	}
	held, err := h.blame(file, img.Setter, line, cur.String(), img.ImageRef.String(), func(parent mirror.Hash) (string, int, bool, error) {
		data, err := h.mirror.File(parent, file)
		if errors.Is(err, fs.ErrNotExist) {
			return "", 0, false, nil
		}
		if err != nil {
			return "", 0, false, err
		}
		prev, line, ok, err := argocd.Current(data, typ, img)
		if err != nil {
			// An override file that did not parse then held nothing of ours.
			return "", 0, false, nil
		}
		return prev.String(), line, ok, nil
	})
	if err != nil {
		h.err = err
		return true
	}
	if held == nil || h.released[held.HoldKey] {
		return false
	}
	h.holds = append(h.holds, *held)
	return true
}

// previous finds the marker of site in the file as the commit parent had
// it: the same marker, counted in file order (a file may mark several
// values for one setter). ok is false when the parent has no such marker.
func (h *holdCheck) previous(file string, site setters.MarkerSite, parent mirror.Hash) (string, int, bool, error) {
	now, err := h.markers(h.commit, file)
	if err != nil || now == nil {
		return "", 0, false, err
	}
	nth := -1
	for _, m := range now {
		if m.Marker == site.Marker {
			nth++
		}
		if m.Line == site.Line {
			break
		}
	}
	before, err := h.markers(parent, file)
	if err != nil || before == nil {
		return "", 0, false, err
	}
	for _, m := range before {
		if m.Marker != site.Marker {
			continue
		}
		if nth == 0 {
			return m.Value, m.Line, true, nil
		}
		nth--
	}
	return "", 0, false, nil
}

// markers are a file's markers at a commit; nil when it has no such file
// or it does not parse there.
func (h *holdCheck) markers(commit mirror.Hash, file string) ([]setters.MarkerSite, error) {
	data, err := h.mirror.File(commit, file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ms []setters.MarkerSite
	if named, ok := h.named[file]; ok {
		ms, err = setters.NamedMarkers(data, named)
	} else {
		ms, err = setters.FileMarkers(file, data)
	}
	if err != nil {
		return nil, nil
	}
	return ms, nil
}
