package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"toolkit.dev/image-toolkit/pkg/git"
	"toolkit.dev/image-toolkit/pkg/writeback"
	"toolkit.dev/image-toolkit/update-job-controller/engine/mirror"
)

// push sends the commit to the push branch, then to the Extra refs. They
// are separate pushes so a rejected branch push, which is retried from a
// new head, never leaves an extra ref pointing at a commit that was
// abandoned. A non-fast-forward rejection of the branch is returned as
// mirror.ErrNonFastForward for the caller to retry.
func (r *run) push(ctx context.Context, commit mirror.Hash) error {
	t := r.plan.Target
	p := Push{Commit: commit.String(), Base: r.res.CheckoutRevision, Refs: t.Refs(), Plans: r.pushPlans}
	// Asked before BeforePush, so that a store's failure records no
	// commit as being pushed.
	if err := r.credentials(ctx); err != nil {
		return err
	}
	if err := r.beforePush(ctx, p); err != nil {
		return err
	}
	r.res.Commit = p.Commit
	r.res.PushedRefs = nil
	var groups [][]writeback.RefUpdate
	if t.Branch != "" {
		groups = append(groups, []writeback.RefUpdate{{Dst: "refs/heads/" + t.Branch, Force: t.Force}})
	}
	if len(t.Extra) > 0 {
		groups = append(groups, t.Extra)
	}
	for i, refs := range groups {
		err := r.pushRefs(ctx, commit, refs)
		if err != nil {
			if i == 0 && !errors.Is(err, git.ErrAuthentication) && !t.Force &&
				!errors.Is(err, mirror.ErrNonFastForward) && r.raced(ctx) {
				// The server's ref update lost a race with another push
				// ("failed to update ref"): that is a non-fast-forward too.
				err = fmt.Errorf("%w: %w", mirror.ErrNonFastForward, err)
			}
			if i == 0 && errors.Is(err, mirror.ErrNonFastForward) {
				return err
			}
			return gitError(err)
		}
		for _, ref := range refs {
			r.res.PushedRefs = append(r.res.PushedRefs, ref.Dst)
		}
	}
	r.afterPush(ctx, p)
	return nil
}

// pushRefs is one push, timed and observed.
func (r *run) pushRefs(ctx context.Context, commit mirror.Hash, refs []writeback.RefUpdate) error {
	pctx, cancel := context.WithTimeout(ctx, r.timeout())
	defer cancel()
	start := time.Now()
	err := r.mirror.Push(pctx, r.creds.Git, commit, refs)
	r.observe(OpPush, start)
	return err
}

// raced reports whether the push branch moved away from the commit the run
// started from, i.e. someone else pushed meanwhile.
func (r *run) raced(ctx context.Context) bool {
	fctx, cancel := context.WithTimeout(ctx, r.timeout())
	defer cancel()
	if err := r.mirror.Fetch(fctx, r.creds.Git); err != nil {
		return false
	}
	now, _, err := r.mirror.Resolve(writeback.Ref{Branch: r.plan.Target.Branch})
	_, started, _ := git.ParseRevision(r.res.CheckoutRevision)
	return err == nil && started != now.String()
}
