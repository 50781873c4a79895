package events

import (
	"context"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// drops counts dropped events for a log line at most every
// dropLogInterval: an endpoint or API server down for an hour is one line
// a minute, not one per event.
type drops struct {
	lastLog  atomic.Int64 // unix nanoseconds
	unlogged atomic.Int64 // drops since the last log line
}

// add counts a drop, and returns the drops to log now, or 0.
func (d *drops) add() int64 {
	d.unlogged.Add(1)
	now, last := time.Now().UnixNano(), d.lastLog.Load()
	if now-last >= int64(dropLogInterval) && d.lastLog.CompareAndSwap(last, now) {
		return d.unlogged.Swap(0)
	}
	return 0
}

// retrying calls try until it succeeds, fails in a way that will not pass
// (retry false), or has been tried attempts times, pausing between tries
// for a backoff that doubles up to maxBackoff; onRetry, when set, is
// called before each pause. It returns the tries made and the last error,
// and ok false when ctx ended first.
func retrying(ctx context.Context, attempts int, backoff, maxBackoff time.Duration, try func() (retry bool, err error), onRetry func()) (tries int, ok bool, err error) {
	wait := backoff
	for tries = 1; ; tries++ {
		var retry bool
		if retry, err = try(); err == nil {
			return tries, true, nil
		}
		if ctx.Err() != nil {
			return tries, false, err
		}
		if !retry || tries >= attempts {
			return tries, true, err
		}
		if onRetry != nil {
			onRetry()
		}
		// Half the pause plus a random part of the other half: the
		// controllers do not come back to a restarted server in step.
		pause := wait/2 + rand.N(wait/2+1)
		select {
		case <-ctx.Done():
			return tries, false, err
		case <-time.After(pause):
		}
		wait = min(2*wait, maxBackoff)
	}
}
