package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"toolkit.dev/image-toolkit/pkg/writeback"
	"toolkit.dev/image-toolkit/update-job-controller/engine/mirror"
)

// Outcome is what a group run did for one of its plans: its own Result
// (the shared commit in Commit when the commit carries its changes) and
// its own failure.
type Outcome struct {
	Result
	Err error
}

// RunGroup carries out plans that push to the same branch as one fetch,
// one checkout of their paths, one commit and one push: the many
// automations of a monorepo, or one automation's many paths. The plans
// must share writeback.Plan.GroupKey; each keeps its own path, images,
// discovery and message template.
//
// A plan whose update fails (a missing path, a template that does not
// render) fails alone, and the others still land. A failure of what they
// share (the fetch, the commit, the push) is every plan's. The commit
// message is the plans' own messages one after the other, under a subject
// that counts them; with one plan changing files it is that plan's
// message alone. A plan whose Resume is on the branch, and changed files
// under its path, already landed and takes no part. Push.Plans tells
// BeforePush and AfterPush which plans the commit carries.
func (e *Engine) RunGroup(ctx context.Context, plans []writeback.Plan) []Outcome {
	outs := make([]Outcome, len(plans))
	fail := func(err error) []Outcome {
		for i := range outs {
			if outs[i].Err == nil && outs[i].Commit == "" {
				outs[i].Err = err
			}
		}
		return outs
	}
	if len(plans) == 0 {
		return outs
	}
	key := plans[0].GroupKey()
	for i, p := range plans {
		if err := e.Check(p); err != nil {
			outs[i].Err = err
			continue
		}
		if p.Update.Container != nil || p.Target.PullRequest != nil || p.GroupKey() != key {
			outs[i].Err = invalidf("plan %d cannot share a commit with plan 0: a container, a pull request, or another repository, checkout, target or author", i)
		}
	}
	g := &group{run: &run{Engine: e, plan: plans[0]}, plans: plans, outs: outs, done: make([]bool, len(plans))}
	for i := range outs {
		g.done[i] = outs[i].Err != nil
	}
	m, release, err := e.cache.Open(plans[0].Repository)
	if err != nil {
		return fail(retryable(KindGit, err))
	}
	defer release()
	defer g.removeWorkDirs()
	g.mirror = m
	if err := g.rounds(ctx); err != nil {
		return fail(err)
	}
	return outs
}

// group is one RunGroup: the shared run (its plan is the first, for what
// the plans share) and each plan's outcome.
type group struct {
	*run
	plans []writeback.Plan
	outs  []Outcome
	// done marks plans that take no part in the rounds: refused (their
	// Err says why) or landed before (their Resume is on the branch).
	done []bool
}

func (g *group) rounds(ctx context.Context) error {
	for round := 0; ; round++ {
		oid, err := g.fetchAndResolve(ctx)
		if err != nil {
			return err
		}
		if round == 0 {
			g.resume()
		}
		commit, err := g.update(ctx, oid)
		if err != nil || commit.IsZero() {
			return err
		}
		err = g.push(ctx, commit)
		if errors.Is(err, mirror.ErrNonFastForward) && round < g.settings.PushRetries {
			if err := g.retryAfterRace(ctx, round); err != nil {
				return err
			}
			continue
		}
		if e := (*Error)(nil); !errors.As(err, &e) && errors.Is(err, mirror.ErrNonFastForward) {
			err = gitError(fmt.Errorf("gave up after %d retries: %w", g.res.Retries, err))
		}
		if err != nil {
			return err
		}
		for _, i := range g.pushPlans {
			o := &g.outs[i]
			o.Commit, o.PushedRefs, o.Retries = g.res.Commit, g.res.PushedRefs, g.res.Retries
		}
		return nil
	}
}

// resume marks the plans whose earlier push (Plan.Resume) the branch
// holds, as fetched, and changed files under their paths: they are done.
// A plan the commit changed nothing of runs again: a batch job resumes
// every plan from its one status.pushingCommit, which carries only the
// plans that changed files (one whose update failed or found nothing to
// change would otherwise be called landed).
func (g *group) resume() {
	for i, p := range g.plans {
		if g.done[i] || p.Resume == "" {
			continue
		}
		if msg, ok := g.mirror.Holds("refs/heads/"+p.Target.Branch, p.Resume); ok && g.mirror.Changed(p.Resume, p.Path) {
			o := &g.outs[i]
			o.CheckoutRevision, o.Commit, o.Message, o.PushedRefs = g.res.CheckoutRevision, p.Resume, msg, p.Target.Refs()
			g.done[i] = true
		}
	}
}

// update checks out the active plans' paths once, runs each plan's
// setters on its own path, and commits what they changed together.
func (g *group) update(ctx context.Context, oid mirror.Hash) (mirror.Hash, error) {
	g.res.Commit, g.res.Message, g.res.PushedRefs = "", "", nil
	g.pushPlans = nil
	var active []int
	for i := range g.plans {
		if !g.done[i] {
			active = append(active, i)
		}
	}
	if len(active) == 0 {
		return mirror.Hash{}, nil
	}
	tmp, err := g.workDir("checkout-")
	if err != nil {
		return mirror.Hash{}, err
	}
	plans := make([]writeback.Plan, 0, len(active))
	for _, i := range active {
		plans = append(plans, g.plans[i])
	}
	if err := g.checkoutFiltered(oid, tmp, plans...); err != nil {
		return mirror.Hash{}, err
	}
	var files, messages []string
	var msg string
	seen := map[string]bool{}
	var changing []int
	for _, i := range active {
		o := &g.outs[i]
		o.Result = Result{CheckoutRevision: g.res.CheckoutRevision}
		o.Err = nil
		c, err := apply(g.plans[i], tmp, &o.Result, newHoldCheck(g.mirror, oid, g.plans[i]))
		if err == nil && c == nil && overlaps(seen, g.plans[i].Path) {
			c, err = g.applyPristine(oid, g.plans[i], &o.Result)
		}
		if err != nil {
			// This plan alone fails; the others go on.
			o.Err = err
			continue
		}
		if c == nil {
			continue
		}
		o.Message = c.Message
		changing = append(changing, i)
		if len(changing) == 1 {
			msg = c.Message
		}
		messages = append(messages, strings.TrimRight(c.Message, "\n"))
		for _, f := range c.Files {
			if !seen[f] {
				seen[f] = true
				files = append(files, f)
			}
		}
	}
	if len(changing) == 0 {
		return mirror.Hash{}, nil
	}
	if len(changing) > 1 {
		msg = fmt.Sprintf("Update images of %d automations on %s\n\n%s\n", len(changing), g.plan.Target, strings.Join(messages, "\n\n"))
	}
	commit, err := g.commit(ctx, oid, tmp, &Change{Dir: tmp, Files: files, Message: msg})
	if commit.IsZero() || err != nil {
		return mirror.Hash{}, err
	}
	g.pushPlans = changing
	return commit, nil
}

// overlaps reports whether a file the group changed lies under dir (the
// repository's root when empty).
func overlaps(changed map[string]bool, dir string) bool {
	dir = strings.Trim(path.Clean("/"+dir), "/")
	for f := range changed {
		if dir == "" || f == dir || strings.HasPrefix(f, dir+"/") {
			return true
		}
	}
	return false
}

// applyPristine runs plan on its path as the fetched revision has it, in
// a checkout of its own, for a plan that found nothing to change after an
// earlier plan of the group changed files under its path. Values agree in
// a group, so what the earlier plan wrote is what this plan would have:
// its changes are those, and the shared commit carries them for it too
// (without this it reported NoChange, though the commit changed its file).
// What it writes here is thrown away; the group's checkout already holds
// it.
func (g *group) applyPristine(oid mirror.Hash, plan writeback.Plan, out *Result) (*Change, error) {
	// Thrown away before the commit: removed now, not with the run's
	// checkouts (workDir), so a batch's many of them do not pile up.
	tmp, err := os.MkdirTemp(g.settings.WorkDir, "checkout-")
	if err != nil {
		return nil, retryable(KindGit, err)
	}
	defer os.RemoveAll(tmp)
	if err := g.checkoutFiltered(oid, tmp, plan); err != nil {
		return nil, err
	}
	return apply(plan, tmp, out, newHoldCheck(g.mirror, oid, plan))
}
