package registry

import (
	"container/heap"
	"context"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"toolkit.dev/image-toolkit/pkg/httpwait"
)

// simRegistry is a registry's token bucket in virtual time: QPS, burst,
// and optionally the quota headers testregistry's Limit sends.
type simRegistry struct {
	qps, burst float64
	headers    bool
	// noRetryAfter refuses without saying when to come back.
	noRetryAfter bool
	tokens       float64
	last         time.Time
}

func (r *simRegistry) answer(now time.Time) *http.Response {
	if r.last.IsZero() {
		r.tokens, r.last = r.burst, now
	}
	r.tokens = min(r.burst, r.tokens+now.Sub(r.last).Seconds()*r.qps)
	r.last = now
	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}}
	if r.tokens >= 1 {
		r.tokens--
	} else {
		resp.StatusCode = http.StatusTooManyRequests
		if !r.noRetryAfter {
			resp.Header.Set("Retry-After", strconv.Itoa(int(math.Ceil((1-r.tokens)/r.qps))))
		}
	}
	if r.headers {
		resp.Header.Set("RateLimit-Limit", strconv.FormatFloat(r.qps, 'f', -1, 64)+";w=1")
		resp.Header.Set("RateLimit-Remaining", strconv.Itoa(int(r.tokens))+";w=1")
	}
	return resp
}

// simEvent is a worker's next step: ready to queue a request, sending it,
// or reading its answer.
type simEvent struct {
	at     time.Time
	worker int
	step   int // 0 ready, 1 send, 2 answer
	sent   time.Time
	resp   *http.Response
}

type simQueue []simEvent

func (q simQueue) Len() int           { return len(q) }
func (q simQueue) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q simQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *simQueue) Push(x any)        { *q = append(*q, x.(simEvent)) }
func (q *simQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type simResult struct {
	// refused and answered count 429s and other answers, in the whole run
	// and in its second half (when the limiter should have settled).
	refused, answered, lateRefused, lateAnswered int
	// maxPerSecond is the most requests sent in any one-second window.
	maxPerSecond int
	rate         float64
}

// simulate runs workers scanning back to back for d of virtual time
// through a limiter, against reg, each answer taking latency; a refused
// request is retried after Retry-After, as politeTransport does.
func simulate(h *hostLimiter, reg *simRegistry, workers int, latency, d time.Duration) simResult {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	half, end := start.Add(d/2), start.Add(d)
	q := &simQueue{}
	for w := range workers {
		heap.Push(q, simEvent{at: start, worker: w})
	}
	var res simResult
	var sends []time.Time
	for q.Len() > 0 {
		e := heap.Pop(q).(simEvent)
		if e.at.After(end) {
			break
		}
		switch e.step {
		case 0:
			r := h.reserve(e.at, kindTags)
			heap.Push(q, simEvent{at: e.at.Add(r.delay), worker: e.worker, step: 1})
		case 1:
			if h.pausedAt(e.at) { // as wait does
				heap.Push(q, simEvent{at: e.at, worker: e.worker})
				continue
			}
			sends = append(sends, e.at)
			heap.Push(q, simEvent{at: e.at.Add(latency), worker: e.worker, step: 2, sent: e.at, resp: reg.answer(e.at)})
		case 2:
			h.observe(e.sent, e.at, kindTags, e.resp)
			next := e.at
			late := e.at.After(half)
			if e.resp.StatusCode == http.StatusTooManyRequests {
				res.refused++
				if late {
					res.lateRefused++
				}
				wait, ok := httpwait.RetryAfter(e.resp.Header, e.at)
				if !ok {
					wait = 500 * time.Millisecond // backoff's first wait, without jitter
				}
				next = next.Add(wait)
			} else {
				res.answered++
				if late {
					res.lateAnswered++
				}
			}
			heap.Push(q, simEvent{at: next, worker: e.worker})
		}
	}
	for i, j := 0, 0; i < len(sends); i++ {
		for sends[i].Sub(sends[j]) >= time.Second {
			j++
		}
		res.maxPerSecond = max(res.maxPerSecond, i-j+1)
	}
	res.rate = h.rate
	return res
}

// TestAdaptiveConverges proves, in virtual time so no timing can flake,
// how the limiter settles against a registry enforcing a limit: no more
// refusals than a fixed limiter would draw (at the ceiling when the limit
// is silent, since no fixed rate can know it; at the limit itself when the
// registry announces it), about one refusal per hold once settled, most of
// the limit used, and never above the ceiling.
func TestAdaptiveConverges(t *testing.T) {
	tests := []struct {
		name    string
		ceiling float64
		burst   int
		reg     simRegistry
		workers int
		// fixedAtLimit compares with a fixed limiter at the registry's
		// own rate and burst instead of one at the ceiling.
		fixedAtLimit bool
		minUse       float64 // of the registry's limit, answered once settled
	}{
		{name: "a silent limit far below the ceiling", ceiling: 200, burst: 100, workers: 4,
			reg: simRegistry{qps: 10, burst: 5}, minUse: 0.6},
		{name: "a silent limit just below the ceiling", ceiling: 100, burst: 100, workers: 8,
			reg: simRegistry{qps: 80, burst: 40}, minUse: 0.6},
		{name: "a silent limit without Retry-After", ceiling: 200, burst: 100, workers: 4,
			reg: simRegistry{qps: 20, burst: 10, noRetryAfter: true}, minUse: 0.6},
		{name: "a limit above the ceiling", ceiling: 50, burst: 10, workers: 4,
			reg: simRegistry{qps: 100, burst: 100}},
		{name: "an announced limit below the ceiling", ceiling: 200, burst: 100, workers: 4,
			reg: simRegistry{qps: 50, burst: 20, headers: true}, fixedAtLimit: true, minUse: 0.8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const d = 10 * time.Minute
			reg := tt.reg
			got := simulate(newHostLimiter("r.example.com", tt.ceiling, tt.burst, false, 30*time.Second, NewMetrics()),
				&reg, tt.workers, 2*time.Millisecond, d)
			fixed := newHostLimiter("r.example.com", tt.ceiling, tt.burst, true, 30*time.Second, NewMetrics())
			if tt.fixedAtLimit {
				fixed = newHostLimiter("r.example.com", tt.reg.qps, int(tt.reg.burst), true, 30*time.Second, NewMetrics())
			}
			reg = tt.reg
			base := simulate(fixed, &reg, tt.workers, 2*time.Millisecond, d)
			t.Logf("adaptive %+v; fixed %+v", got, base)

			if got.refused > base.refused {
				t.Errorf("%d requests refused, a fixed limiter drew %d", got.refused, base.refused)
			}
			if tt.reg.qps >= tt.ceiling && (got.refused != 0 || got.rate != tt.ceiling) {
				t.Errorf("under a higher limit: %d refusals, rate %.1f; want none, at the ceiling", got.refused, got.rate)
			}
			// Settled, a registry with a steady limit refuses about once
			// per hold, never in streaks.
			if most := int((d/2)/holdFor) + 2; got.lateRefused > most {
				t.Errorf("%d refusals in the second half, want at most %d", got.lateRefused, most)
			}
			if most := int(tt.ceiling) + tt.burst; got.maxPerSecond > most {
				t.Errorf("%d requests in one second, above the ceiling's %d", got.maxPerSecond, most)
			}
			if use := float64(got.lateAnswered) / (d / 2).Seconds() / tt.reg.qps; use < tt.minUse {
				t.Errorf("used %.0f%% of the registry's limit once settled, want at least %.0f%%", 100*use, 100*tt.minUse)
			}
		})
	}
}

// TestSlowStart proves, in virtual time, where the rate starts below a
// higher ceiling and how it climbs: at startQPS, doubling about every
// second while requests queue, to the ceiling of a registry that keeps up
// within a few seconds and with no refusal; on a registry with a silent
// limit, a single round of refusals ends the climb; and with few requests,
// which never queue, it does not climb at all.
func TestSlowStart(t *testing.T) {
	const ceiling, burst = 500, 100
	t.Run("a registry that keeps up", func(t *testing.T) {
		h := newHostLimiter("r.example.com", ceiling, burst, false, 30*time.Second, NewMetrics())
		if h.rate != startQPS {
			t.Fatalf("starts at %.0f a second, want %d", h.rate, startQPS)
		}
		reg := simRegistry{qps: 1e6, burst: 1e6}
		second := simulate(h, &reg, 16, 2*time.Millisecond, time.Second)
		if second.rate < 1.5*startQPS || second.rate > 2.5*startQPS {
			t.Errorf("after a busy second the rate is %.0f, want about double %d", second.rate, startQPS)
		}
		h = newHostLimiter("r.example.com", ceiling, burst, false, 30*time.Second, NewMetrics())
		reg = simRegistry{qps: 1e6, burst: 1e6}
		got := simulate(h, &reg, 16, 2*time.Millisecond, 4*time.Second)
		if got.rate != ceiling || got.refused != 0 {
			t.Errorf("after 4 busy seconds: rate %.0f, %d refused; want the ceiling, none", got.rate, got.refused)
		}
		if most := ceiling + burst; got.maxPerSecond > most {
			t.Errorf("%d requests in one second, above the ceiling's %d", got.maxPerSecond, most)
		}
	})
	t.Run("a silent limit between start and ceiling", func(t *testing.T) {
		h := newHostLimiter("r.example.com", ceiling, burst, false, 30*time.Second, NewMetrics())
		reg := simRegistry{qps: 250, burst: 50}
		got := simulate(h, &reg, 16, 2*time.Millisecond, 5*time.Minute)
		if !h.refused || got.rate >= reg.qps {
			t.Errorf("rate %.0f, refused %v: want below the registry's %.0f after its refusals", got.rate, h.refused, reg.qps)
		}
		if use := float64(got.lateAnswered) / 150 / reg.qps; use < 0.6 {
			t.Errorf("used %.0f%% of the registry's limit once settled, want at least 60%%", 100*use)
		}
		if most := 150/int(holdFor.Seconds()) + 2; got.lateRefused > most {
			t.Errorf("%d refusals in the second half, want at most %d", got.lateRefused, most)
		}
	})
	t.Run("few requests", func(t *testing.T) {
		h := newHostLimiter("r.example.com", ceiling, burst, false, 30*time.Second, NewMetrics())
		reg := simRegistry{qps: 1e6, burst: 1e6}
		// Two workers with 50 ms answers send 40 a second, under the
		// start: nothing queues, so nothing grows.
		got := simulate(h, &reg, 2, 50*time.Millisecond, 10*time.Minute)
		if got.rate != startQPS {
			t.Errorf("after 10 minutes of 40 requests a second the rate is %.0f, want %d still", got.rate, startQPS)
		}
	})
	t.Run("a ceiling below the start", func(t *testing.T) {
		if h := newHostLimiter("r.example.com", 20, 10, false, 30*time.Second, NewMetrics()); h.rate != 20 {
			t.Errorf("starts at %.0f, want the ceiling, 20", h.rate)
		}
	})
}

// TestParseQuota proves the rate-limit headers registries send are read:
// Docker Hub's with a window, GitHub's X- forms with a Unix reset, a reset
// in seconds, lists, and nonsense ignored.
func TestParseQuota(t *testing.T) {
	now := time.Unix(1_900_000_000, 0)
	tests := []struct {
		name    string
		headers map[string]string
		want    quota
	}{
		{"none", nil, quota{limit: -1, remaining: -1}},
		{"Docker Hub", map[string]string{"RateLimit-Limit": "100;w=21600", "RateLimit-Remaining": "76;w=21600"},
			quota{limit: 100, remaining: 76, window: 6 * time.Hour}},
		{"a window on remaining only", map[string]string{"RateLimit-Limit": "100", "RateLimit-Remaining": "5;w=60"},
			quota{limit: 100, remaining: 5, window: time.Minute}},
		{"GitHub's X- forms, reset a Unix time", map[string]string{"X-RateLimit-Limit": "5000", "X-RateLimit-Remaining": "12",
			"X-RateLimit-Reset": "1900000030"}, quota{limit: 5000, remaining: 12, reset: 30 * time.Second}},
		{"reset in seconds, a list", map[string]string{"RateLimit-Limit": "10, 10;w=1, 1000;w=3600", "RateLimit-Remaining": "0",
			"RateLimit-Reset": "2"}, quota{limit: 10, remaining: 0, reset: 2 * time.Second}},
		{"a reset in the past", map[string]string{"X-RateLimit-Reset": "1899999990"}, quota{limit: -1, remaining: -1}},
		{"nonsense", map[string]string{"RateLimit-Limit": "lots", "RateLimit-Remaining": "-3;w=x"}, quota{limit: -1, remaining: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tt.headers {
				h.Set(k, v)
			}
			if got := parseQuota(h, now); got != tt.want {
				t.Errorf("parseQuota = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestQuotaPacing proves when an announced quota paces requests: below a
// tenth left, only the kind of request that carried it, spreading the rest
// until the reset (or at 90% of the quota's rate without one), waiting for
// the reset when nothing is left, and not after a fifth is back.
func TestQuotaPacing(t *testing.T) {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		headers map[string]string
		// wantGap is the wait between two more manifest requests; 0 when
		// not paced.
		wantGap time.Duration
	}{
		{"plenty left", map[string]string{"RateLimit-Limit": "100;w=21600", "RateLimit-Remaining": "76;w=21600"}, 0},
		{"little left, a window", map[string]string{"RateLimit-Limit": "100;w=21600", "RateLimit-Remaining": "9;w=21600"},
			time.Duration(float64(time.Second) / (0.9 * 100 / 21600))},
		{"little left, a reset", map[string]string{"RateLimit-Limit": "100", "RateLimit-Remaining": "4", "RateLimit-Reset": "40"},
			10 * time.Second},
		{"nothing left, a reset", map[string]string{"RateLimit-Limit": "100", "RateLimit-Remaining": "0", "RateLimit-Reset": "30"},
			30 * time.Second},
		{"little left, no time to spread it over", map[string]string{"RateLimit-Limit": "100", "RateLimit-Remaining": "1"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHostLimiter("r.example.com", 100, 100, false, 30*time.Second, NewMetrics())
			resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}}
			for k, v := range tt.headers {
				resp.Header.Set(k, v)
			}
			h.observe(start, start, kindManifests, resp)
			// Two manifest requests: with something left the first goes
			// at once and the second waits the gap; with nothing left
			// both do.
			first := h.reserve(start, kindManifests).delay
			second := h.reserve(start, kindManifests).delay
			gap := second - first
			if tt.headers["RateLimit-Remaining"] == "0" {
				gap = first
			}
			if d := gap - tt.wantGap; d < -time.Millisecond || d > time.Millisecond {
				t.Errorf("manifests %s apart (first after %s), want %s", gap, first, tt.wantGap)
			}
			if d := h.reserve(start, kindTags).delay; d != 0 {
				t.Errorf("a tag list waits %s: the quota came on a manifest answer", d)
			}
			// A fifth of the quota back ends the pacing.
			resp.Header.Set("RateLimit-Remaining", "20")
			h.observe(start, start, kindManifests, resp)
			if d := h.reserve(start, kindManifests).delay; d != 0 && tt.headers["RateLimit-Remaining"] != "0" {
				t.Errorf("with a fifth back, a manifest waits %s", d)
			}
		})
	}
}

// TestWaitFailsFast proves a request does not sit in the limiter when its
// turn is past the caller's deadline or further away than a single wait
// may last (a nearly used quota), and waits when it is near.
func TestWaitFailsFast(t *testing.T) {
	tests := []struct {
		name      string
		remaining string // of a quota of 100, resetting in 600 s
		timeout   time.Duration
		wantErr   string
	}{
		{"a turn past the deadline", "0", time.Second, "past the deadline"},
		{"a turn further than a wait may last", "0", time.Hour, "trying again later"},
		{"a near turn", "9", time.Hour, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHostLimiter("r.example.com", 100, 100, false, 30*time.Second, NewMetrics())
			resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}}
			resp.Header.Set("RateLimit-Limit", "100")
			resp.Header.Set("RateLimit-Remaining", tt.remaining)
			resp.Header.Set("RateLimit-Reset", "600")
			now := time.Now()
			h.observe(now, now, kindManifests, resp)
			ctx, cancel := context.WithTimeout(context.Background(), tt.timeout)
			defer cancel()
			start := time.Now()
			_, err := h.wait(ctx, kindManifests)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("wait: %v, want %q", err, tt.wantErr)
			}
			if time.Since(start) > 5*time.Second {
				t.Errorf("waited %s", time.Since(start))
			}
		})
	}
}
