package engine

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/argocd"
	"toolkit.dev/image-toolkit/pkg/commitmsg"
	"toolkit.dev/image-toolkit/pkg/discover"
	"toolkit.dev/image-toolkit/pkg/forge"
	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/imagename"
	"toolkit.dev/image-toolkit/pkg/imagesource"
	"toolkit.dev/image-toolkit/pkg/setters"
	"toolkit.dev/image-toolkit/pkg/writeback"
	"toolkit.dev/image-toolkit/update-job-controller/engine/mirror"
)

// data is what the plan's templates see, without the changes.
func data(p writeback.Plan) commitmsg.Data {
	a := p.Commit.Automation
	return commitmsg.Data{Values: p.Commit.Values}.WithAutomation(a.Namespace, a.Name)
}

func (r *run) commitInfo(msg string) mirror.CommitInfo {
	if r.review != nil {
		msg = commitmsg.AddTrailer(msg, r.review.trailer)
	}
	return mirror.CommitInfo{
		Author:  mirror.Author{Name: r.plan.Commit.AuthorName, Email: r.plan.Commit.AuthorEmail},
		Message: msg,
		Signer:  r.creds.Signer,
	}
}

// beforeCommit gives the change to the BeforeCommit hook; false means it
// vetoed the commit.
func (r *run) beforeCommit(ctx context.Context, c *Change) (bool, error) {
	if r.settings.Hooks.BeforeCommit == nil {
		return true, nil
	}
	err := r.settings.Hooks.BeforeCommit(ctx, c)
	if errors.Is(err, ErrVeto) {
		return false, nil
	}
	return err == nil, err
}

// update checks out oid, runs the setters and commits. A nil commit means
// no change.
func (r *run) update(ctx context.Context, oid mirror.Hash) (mirror.Hash, error) {
	out := &r.res
	out.Commit, out.Message, out.PushedRefs = "", "", nil
	tmp, err := r.workDir("checkout-")
	if err != nil {
		return mirror.Hash{}, err
	}
	if err := r.checkoutFiltered(oid, tmp, r.plan); err != nil {
		return mirror.Hash{}, err
	}
	c, err := apply(r.plan, tmp, out, newHoldCheck(r.mirror, oid, r.plan))
	if c == nil || err != nil {
		return mirror.Hash{}, err
	}
	return r.commit(ctx, oid, tmp, c)
}

// apply runs one plan's setters (and discovery) on its path of the
// checkout tmp, records what they did in out, and returns the change to
// commit: nil when the files already hold the values. With holds (nil
// without), the values a person set are left.
func apply(p writeback.Plan, tmp string, out *Result, holds *holdCheck) (*Change, error) {
	dir, err := securePath(tmp, p.Path)
	if err != nil {
		return nil, terminal(KindUpdate, err)
	}
	pols := setters.Policies(p.Update.Images)
	var sites map[string][]setters.Site
	out.Discovered = nil
	if d := p.Update.Discover; d != nil {
		if sites, out.Discovered, err = discoverSites(dir, d, pols); err != nil {
			return nil, retryable(KindUpdate, fmt.Errorf("discovering the images of %s: %w", p.Path, err))
		}
	}
	if len(p.Update.Charts) > 0 {
		if sites, err = chartSites(dir, p.Update.Charts, sites); err != nil {
			return nil, terminal(KindUpdate, fmt.Errorf("finding the chart versions of Argo CD Applications under %s: %w", p.Path, err))
		}
	}
	named, err := setters.NamedFiles(p.Update.Files)
	if err != nil {
		return nil, terminal(KindInvalid, err)
	}
	opts := setters.Options{Sites: sites, Named: named}
	if holds != nil {
		holds.named = map[string][]setters.Named{}
		for f, n := range named {
			holds.named[path.Join(p.Path, f)] = n
		}
		opts.Keep = holds.keep
	}
	if holds != nil && len(p.Update.Groups) > 0 {
		// Which members of a promotion group are held is known only
		// once every value was looked at: a dry run first.
		dry := opts
		dry.DryRun = true
		if _, err := setters.UpdateDir(dir, pols, dry); err != nil {
			return nil, retryable(KindUpdate, fmt.Errorf("updating %s: %w", p.Path, err))
		}
		opts.Keep = holds.groupKeep(p.Update.Groups)
	}
	res, err := setters.UpdateDir(dir, pols, opts)
	if err != nil {
		return nil, retryable(KindUpdate, fmt.Errorf("updating %s: %w", p.Path, err))
	}
	if err := writeOverrides(tmp, p, res, holds); err != nil {
		return nil, err
	}
	out.Holds = nil
	if holds != nil {
		if holds.err != nil {
			return nil, retryable(KindGit, fmt.Errorf("reading the history of the marked values (holds): %w", holds.err))
		}
		out.Holds = holds.holds
		slices.SortFunc(out.Holds, func(a, b Hold) int {
			return cmp.Or(strings.Compare(a.Path, b.Path), a.Line-b.Line)
		})
	}
	withSources(res, p.Update.Sources, func(u, from, to string) string { return compareURL(p, u, from, to) })
	withApprovals(res, p.Update.Approvals)
	out.Changes = res
	out.Problems = nil
	for _, pr := range res.Problems {
		// Links to files without markers dangle in the filtered checkout.
		if !errors.Is(pr.Err, fs.ErrNotExist) {
			out.Problems = append(out.Problems, path.Join(p.Path, pr.Error()))
		}
	}
	if len(res.Files) == 0 {
		return nil, nil
	}
	changed := make([]string, 0, len(res.Files))
	for _, f := range res.Files {
		changed = append(changed, path.Join(p.Path, f.Path))
	}
	if d := p.Update.Discover; d != nil && d.WriteMarkers {
		if changed, err = writeMarkers(dir, p.Path, d, pols, changed); err != nil {
			return nil, err
		}
	}
	d := data(p)
	d.Changed = res.In(p.Path).V2()
	msg, err := commitmsg.Render(p.Commit.MessageTemplate, d)
	if err != nil {
		return nil, terminal(KindInvalid, err)
	}
	// A commit says which source changes it ships, whatever its
	// template: an Image-Source trailer per source revision.
	for _, s := range d.Changed.Sources() {
		msg = commitmsg.AddTrailer(msg, "Image-Source: "+s.URL+"@"+s.Revision)
	}
	// And who approved the images a promotion waited for approval for.
	var approvers []string
	for _, a := range d.Changed.Approvals() {
		if !slices.Contains(approvers, a.By) {
			approvers = append(approvers, a.By)
			msg = commitmsg.AddTrailer(msg, "Approved-by: "+a.By)
		}
	}
	return &Change{Dir: dir, Files: changed, Message: msg}, nil
}

// withSources gives each change the source side of its image (what the
// new image was built from, and against the image it replaces, the
// revisions to compare), from the plan's sources by the change's policy.
func withSources(res *setters.Result, sources map[string]*meta.ImageSourceChange, compare func(url, from, to string) string) {
	if len(sources) == 0 {
		return
	}
	for i := range res.Files {
		for j := range res.Files[i].Objects {
			changes := res.Files[i].Objects[j].Changes
			for k := range changes {
				c := &changes[k]
				c.Source = imagesource.Change(sources[policyOf(c.Setter)], c.OldValue, compare)
			}
		}
	}
}

// withApprovals gives each change whose policy's image was approved the
// approval.
func withApprovals(res *setters.Result, approvals map[string]*meta.Approval) {
	if len(approvals) == 0 {
		return
	}
	for i := range res.Files {
		for j := range res.Files[i].Objects {
			changes := res.Files[i].Objects[j].Changes
			for k := range changes {
				changes[k].Approval = approvals[policyOf(changes[k].Setter)]
			}
		}
	}
}

// compareURL is the forge's page comparing two revisions of a source
// repository: the forge its host tells, else, for a source on the host of
// the plan's repository, the forge the plan's pull request names (a team's
// Gitea or GitLab that holds both).
func compareURL(p writeback.Plan, source, from, to string) string {
	if u := forge.CompareURL(source, "", from, to); u != "" {
		return u
	}
	pr := p.Target.PullRequest
	if pr == nil || pr.Provider == "" {
		return ""
	}
	src, err1 := git.ParseURL(source)
	repo, err2 := git.ParseURL(p.Repository)
	if err1 != nil || err2 != nil || !strings.EqualFold(src.Host, repo.Host) {
		return ""
	}
	return forge.CompareURL(source, forge.Provider(pr.Provider), from, to)
}

// policyOf is the policy key (NAMESPACE:NAME) of a marker's setter, which
// may name a field after it (apps:podinfo:tag).
func policyOf(setter string) string {
	if ns, rest, ok := strings.Cut(setter, ":"); ok {
		name, _, _ := strings.Cut(rest, ":")
		return ns + ":" + name
	}
	return setter
}

// commit gives the change to BeforeCommit and commits it on oid; zero when
// vetoed or when the files equal the parent's.
func (r *run) commit(ctx context.Context, oid mirror.Hash, tmp string, change *Change) (mirror.Hash, error) {
	if ok, err := r.beforeCommit(ctx, change); !ok {
		return mirror.Hash{}, err
	}
	commit, err := r.mirror.Commit(oid, tmp, change.Files, r.commitInfo(change.Message))
	if errors.Is(err, mirror.ErrNoChange) {
		return mirror.Hash{}, nil
	}
	if err != nil {
		return mirror.Hash{}, retryable(KindGit, fmt.Errorf("committing: %w", err))
	}
	r.res.Message = change.Message
	return commit, nil
}

// writeOverrides writes the plan's images into its Argo CD override files
// under the checkout root, and adds each changed file to res, its changes
// under the Application the file is named for. A file Argo CD could not
// read is the job's failure, not rewritten.
func writeOverrides(root string, p writeback.Plan, res *setters.Result, holds *holdCheck) error {
	if len(p.Update.ArgoCD) == 0 {
		return nil
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return retryable(KindGit, err)
	}
	defer r.Close()
	for _, o := range p.Update.ArgoCD {
		data, err := r.ReadFile(o.File)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return terminal(KindUpdate, fmt.Errorf("override file %s: %w", o.File, err))
		}
		images := make([]argocd.Image, 0, len(o.Images))
		for _, img := range o.Images {
			ai := argocd.Image{Setter: img.Policy, ImageRef: p.Update.Images[img.Policy],
				ArgoCDImageFields: img.ArgoCDImageFields}
			if holds != nil {
				// A value a person set over the automation's is left, as
				// a marked one is.
				cur, line, ok, err := argocd.Current(data, o.Type, ai)
				if err == nil && ok && cur != ai.ImageRef && holds.keepOverride(o.File, o.Type, ai, cur, line) {
					continue
				}
			}
			images = append(images, ai)
		}
		out, changes, err := argocd.Update(data, o.Type, images)
		if err != nil {
			return terminal(KindUpdate, fmt.Errorf("override file %s: %w", o.File, err))
		}
		if changes == nil {
			continue
		}
		if err := r.MkdirAll(path.Dir(o.File), 0o755); err != nil {
			return retryable(KindUpdate, err)
		}
		if err := r.WriteFile(o.File, out, 0o644); err != nil {
			return retryable(KindUpdate, fmt.Errorf("override file %s: %w", o.File, err))
		}
		app := strings.TrimSuffix(strings.TrimPrefix(path.Base(o.File), ".argocd-source-"), ".yaml")
		res.Files = append(res.Files, meta.FileResult{
			Path:    strings.TrimPrefix(strings.TrimPrefix(o.File, p.Path), "/"),
			Objects: []meta.ObjectResult{{ObjectID: meta.ObjectID{APIVersion: "argoproj.io/v1alpha1", Kind: "Application", Name: app}, Changes: changes}},
		})
	}
	return nil
}

// checkoutFiltered checks out the paths of plans into tmp (everything
// when one of them is the root). Only files that may hold markers (or,
// with discovery, images) are written: the others are left alone, and
// creating thousands of files would dominate the run.
func (r *run) checkoutFiltered(oid mirror.Hash, tmp string, plans ...writeback.Plan) error {
	var paths []string
	discovers := false
	for _, p := range plans {
		discovers = discovers || p.Update.Discover != nil
		if p.Path == "" {
			paths = nil
			break
		}
		paths = append(paths, p.Path)
	}
	filter := mirror.Filter{Name: "markers", Keep: setters.MayHaveMarkers}
	if discovers {
		filter = mirror.Filter{Name: "markers+images", Keep: func(b []byte) bool { return setters.MayHaveMarkers(b) || discover.MayHaveImages(b) }}
	}
	if slices.ContainsFunc(plans, func(p writeback.Plan) bool { return len(p.Update.Charts) > 0 }) {
		// Applications whose chart versions are followed carry no
		// markers.
		markers := filter.Keep
		filter = mirror.Filter{Name: filter.Name + "+applications", Keep: func(b []byte) bool { return markers(b) || bytes.Contains(b, []byte("argoproj.io")) }}
	}
	if err := r.mirror.CheckoutFiltered(oid, tmp, filter, paths...); err != nil {
		return retryable(KindGit, fmt.Errorf("checking out %s: %w", r.res.CheckoutRevision, err))
	}
	// Override files hold no markers, so the filter left them out; named,
	// they are written whatever they hold (when the revision has them).
	var files []string
	for _, p := range plans {
		for _, o := range p.Update.ArgoCD {
			files = append(files, o.File)
		}
		// So are the files update.files names.
		for _, f := range p.Update.Files {
			files = append(files, path.Join(p.Path, f.Path))
		}
	}
	if len(files) > 0 {
		if err := r.mirror.CheckoutFiltered(oid, tmp, mirror.Filter{}, files...); err != nil {
			return retryable(KindGit, fmt.Errorf("checking out the override files of %s: %w", r.res.CheckoutRevision, err))
		}
	}
	return nil
}

// writeMarkers marks what a setter applied to, as tk-image discover
// --write-markers: positions moved with the new values, so discovery runs
// again. It returns changed with the files it wrote.
func writeMarkers(dir, rel string, d *writeback.Discover, pols setters.Policies, changed []string) ([]string, error) {
	again, _, err := discoverSites(dir, d, pols)
	if err != nil {
		return nil, retryable(KindUpdate, fmt.Errorf("discovering the images of %s: %w", rel, err))
	}
	written, _, err := discover.WriteMarkers(dir, again)
	if err != nil {
		return nil, retryable(KindUpdate, fmt.Errorf("writing markers: %w", err))
	}
	for _, f := range written {
		if w := path.Join(rel, f); !slices.Contains(changed, w) {
			changed = append(changed, w)
		}
	}
	return changed, nil
}

// updateByContainer checks out the tree under the plan's path, has the
// Container hook make the new tree and commits the difference. The git
// side (fetch, commit, signing, push, retries) is the setters' own: only
// this step differs.
func (r *run) updateByContainer(ctx context.Context, oid mirror.Hash, round int) (mirror.Hash, error) {
	out := &r.res
	out.Commit, out.Message, out.PushedRefs, out.Files = "", "", nil, nil
	if r.settings.Hooks.Container == nil {
		return mirror.Hash{}, invalidf("the plan updates with a container, but this engine has no Container hook to run it")
	}
	tmp, err := os.MkdirTemp(r.settings.WorkDir, "container-")
	if err != nil {
		return mirror.Hash{}, retryable(KindGit, err)
	}
	defer os.RemoveAll(tmp)
	checkout, result := filepath.Join(tmp, "checkout"), filepath.Join(tmp, "result")
	if err := os.Mkdir(result, 0o700); err != nil {
		return mirror.Hash{}, retryable(KindGit, err)
	}
	p := r.plan
	var paths []string
	if p.Path != "" {
		paths = []string{p.Path}
	}
	if err := r.mirror.Checkout(oid, checkout, paths...); err != nil {
		return mirror.Hash{}, retryable(KindGit, fmt.Errorf("checking out %s: %w", out.CheckoutRevision, err))
	}
	dir, err := securePath(checkout, p.Path)
	if err != nil {
		return mirror.Hash{}, terminal(KindUpdate, err)
	}
	// The container needs only its checkout: other runs of the repository
	// use the mirror meanwhile.
	err = r.mirror.Yield(func() error { return r.settings.Hooks.Container(ctx, round, dir, result) })
	if err != nil {
		return mirror.Hash{}, err
	}
	msg, err := r.containerMessage()
	if err != nil {
		return mirror.Hash{}, terminal(KindInvalid, err)
	}
	change := &Change{Dir: result, Message: msg}
	if ok, err := r.beforeCommit(ctx, change); !ok {
		return mirror.Hash{}, err
	}
	commit, changes, err := r.mirror.CommitDir(oid, p.Path, result, r.commitInfo(change.Message))
	if errors.Is(err, mirror.ErrNoChange) {
		return mirror.Hash{}, nil
	}
	if err != nil {
		return mirror.Hash{}, retryable(KindGit, fmt.Errorf("committing: %w", err))
	}
	for _, c := range changes {
		c.Path = strings.TrimPrefix(strings.TrimPrefix(c.Path, p.Path), "/")
		out.Files = append(out.Files, c)
	}
	out.Message = change.Message
	return commit, nil
}

// containerMessage is the commit message of a container's change: the
// plan's template (whose .Changed is empty: a container's changes are
// files, not values), else one naming the image.
func (r *run) containerMessage() (string, error) {
	p := r.plan
	if p.Commit.MessageTemplate != "" {
		return commitmsg.Render(p.Commit.MessageTemplate, data(p))
	}
	where := p.Path
	if where == "" {
		where = "the repository"
	}
	return fmt.Sprintf("Update %s with %s\n", where, p.Update.Container.Image), nil
}

// securePath joins the update path to the checkout and refuses a result
// that leaves it through a symbolic link.
func securePath(root, rel string) (string, error) {
	base, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", err
	}
	dir, err := filepath.EvalSymlinks(filepath.Join(root, filepath.FromSlash(rel)))
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("update.path %q: %w", rel, ErrPathNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("update.path %q: %w", rel, err)
	}
	if r, err := filepath.Rel(base, dir); err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("update.path %q leaves the repository", rel)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("update.path %q is not a directory", rel)
	}
	return dir, nil
}

// discoverSites finds the images under dir that the plan includes, and
// marks each location of an image a policy names (by canonical image name)
// with that policy.
func discoverSites(dir string, d *writeback.Discover, pols setters.Policies) (map[string][]setters.Site, *Discovered, error) {
	res, err := discover.Dir(dir)
	if err != nil {
		return nil, nil, err
	}
	images := discover.Filter(res.Images, d.Include, d.Exclude)
	// Several policies may name one image; the first by policy name wins,
	// so the choice does not depend on map order.
	byImage := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(pols)) {
		n := imagename.Normalize(pols[k].Name)
		if _, ok := byImage[n]; !ok {
			byImage[n] = k
		}
	}
	filtered := &discover.Result{Images: images}
	sites := filtered.Sites(func(img discover.Image) string { return byImage[img.Name] })
	out := &Discovered{Skipped: len(res.Skipped)}
	for _, img := range images {
		out.Images = append(out.Images, img.Summary(byImage[img.Name]))
	}
	return sites, out, nil
}

// chartSites adds to sites the targetRevision of each chart source of the
// Applications charts names, in the YAML files under dir (found by name:
// argocd.ChartRevisions), as sites of their policies' tags.
func chartSites(dir string, charts []writeback.Chart, sites map[string][]setters.Site) (map[string][]setters.Site, error) {
	if sites == nil {
		sites = map[string][]setters.Site{}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	files, _, err := setters.ManifestFiles(root)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		data, err := root.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, c := range charts {
			at, err := argocd.ChartRevisions(data, c.Namespace, c.Application, c.Chart)
			if err != nil {
				// Not YAML (a template), or no targetRevision: not a
				// manifest to write; the setters report a file that does
				// not parse, and a policy written nowhere is unmarked.
				continue
			}
			for _, pos := range at {
				sites[f] = append(sites[f], setters.Site{Line: pos.Line, Column: pos.Column,
					Marker: setters.Marker{Policy: c.Policy, Field: setters.FieldTag}})
			}
		}
	}
	return sites, nil
}
