package controller

import (
	"context"
	"errors"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/patch"
)

// claim is this runner's hold on a Running job. Writes are serialized and
// guarded by the resourceVersion, so a runner that lost the job (another
// replica reclaimed it after our heartbeat lapsed) never overwrites it.
type claim struct {
	r   *UpdateJobReconciler
	mu  sync.Mutex
	job *updatev1.UpdateJob
}

// update applies change to the job's status while we still hold it. The
// write is guarded by the resourceVersion of our last read or write: it
// succeeds only if nobody wrote the job since, and a conflict is retried
// only while the job is still ours, so a success is itself proof of the
// claim (errClaimLost otherwise, or when the job is gone).
func (c *claim) update(ctx context.Context, change func(*updatev1.UpdateJob)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for try := 0; ; try++ {
		job := c.job.DeepCopy()
		helper := patch.NewHelper(job, c.r.Client)
		change(job)
		err := helper.Patch(ctx, job, patch.WithOptimisticLock())
		if err == nil {
			c.job = job
			return nil
		}
		if apierrors.IsNotFound(err) {
			return errClaimLost
		}
		if !apierrors.IsConflict(err) || try >= 5 {
			return err
		}
		// Someone else wrote the job (labels, or another runner):
		// continue only if it is still ours.
		if err := c.refresh(ctx); err != nil {
			return err
		}
	}
}

// refresh reloads the job from the API server; errClaimLost if it is no
// longer this runner's attempt.
func (c *claim) refresh(ctx context.Context) error {
	fresh := &updatev1.UpdateJob{}
	if err := c.r.APIReader.Get(ctx, client.ObjectKeyFromObject(c.job), fresh); err != nil {
		if apierrors.IsNotFound(err) {
			return errClaimLost
		}
		return err
	}
	if fresh.UID != c.job.UID || fresh.Status.Phase != updatev1.UpdateJobRunning ||
		fresh.Status.Runner != c.r.Runner || fresh.Status.Attempts != c.job.Status.Attempts {
		return errClaimLost
	}
	c.job = fresh
	return nil
}

// beatAge is how long ago the claim's last write renewed its heartbeat.
func (c *claim) beatAge() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if hb := c.job.Status.HeartbeatTime; hb != nil {
		return time.Since(hb.Time)
	}
	return time.Duration(1<<63 - 1)
}

// verify checks, before a push, that the job is still ours.
func (c *claim) verify(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refresh(ctx)
}

// heartbeat renews the claim every interval until the returned stop is
// called; losing the claim cancels the attempt.
func (c *claim) heartbeat(ctx context.Context, interval time.Duration, cancel context.CancelCauseFunc) (stop func()) {
	return every(ctx, interval, func() bool {
		err := c.update(ctx, func(job *updatev1.UpdateJob) {
			job.Status.HeartbeatTime = &metav1.Time{Time: time.Now()}
		})
		if errors.Is(err, errClaimLost) {
			cancel(errClaimLost)
			return false
		}
		if err != nil && ctx.Err() == nil {
			ctrl.LoggerFrom(ctx).Error(err, "renewing the job's heartbeat")
		}
		return true
	})
}

// every runs f each interval (a second when not positive) until f returns
// false, ctx ends or the returned stop is called.
func every(ctx context.Context, interval time.Duration, f func() bool) (stop func()) {
	if interval <= 0 {
		interval = time.Second
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if !f() {
				return
			}
		}
	})
	return func() { close(done); wg.Wait() }
}
