package registry

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"toolkit.dev/image-toolkit/pkg/httpwait"
)

// The adaptive limiter's constants. They are not flags: the ceiling
// (--registry-qps, --registry-burst) is the operator's say, and these only
// shape how the limiter moves below it.
const (
	// decrease multiplies the rate a registry refused. It applies to the
	// allowed rate, not an estimate of what was sent: after a Retry-After
	// pause little was sent, and the registry's limit is not that low.
	decrease = 0.5
	// holdFraction of the refused rate is where growth stops for holdFor,
	// so a registry with a steady limit refuses about once a minute, not
	// at every probe.
	holdFraction = 0.9
	holdFor      = time.Minute
	// growth is added to the rate (requests per second) per answered
	// request: busy, the rate grows 10% a second, so from half the hold
	// it is back within 7 s; idle, it does not grow at all. Between the
	// hold and twice it, where the registry refused last, growth is a
	// tenth of that.
	growth = 0.1
	// startQPS is where a host's rate starts below a higher ceiling: the
	// fixed ceiling the limiter had before it learned to climb, so a host
	// sees nothing faster than before until requests queue for it.
	startQPS = 100
	// slowStartGrowth is growth until a host first refuses: each answered
	// request adds ln 2 requests per second, so while requests queue the
	// rate doubles every second (from startQPS to the default ceiling of
	// 500 in about 2.3 s). A ceiling the operator set is not a rate the
	// registry has shown it takes; a first refusal ends the slow start
	// and AIMD takes over.
	slowStartGrowth = math.Ln2
	// queuedWithin: the rate grows only while requests wait for their
	// turn, as TCP's window grows only while it limits the sender (RFC
	// 7661). Without it, a host with few requests would climb to the
	// ceiling over hours, and a burst after a restart would go out at a
	// rate it never proved to take.
	queuedWithin = time.Second
	// floorQPS is the least the rate drops to; Retry-After and quotas
	// pause below it.
	floorQPS = 0.5
	// lowQuota: quota pacing starts when less than this fraction of an
	// announced quota remains.
	lowQuota = 0.1
	// quotaShare of an announced quota's rate is what pacing uses when the
	// registry does not say when the quota resets.
	quotaShare = 0.9
)

// kind sorts requests by what a registry's quota may count: Docker Hub
// announces its pull quota on manifest answers only, so a low pull quota
// must pace digest lookups, not tag lists.
type kind uint8

const (
	kindOther kind = iota
	kindTags
	kindManifests
	kindBlobs
	numKinds
)

func kindOf(path string) kind {
	switch {
	case strings.HasSuffix(path, "/tags/list"):
		return kindTags
	case strings.Contains(path, "/manifests/"):
		return kindManifests
	case strings.Contains(path, "/blobs/"):
		return kindBlobs
	}
	return kindOther
}

// hostLimiter paces the requests to one registry host: AIMD under the
// ceiling, a pause after Retry-After, and quota pacing per kind.
type hostLimiter struct {
	host    string
	ceiling float64
	burst   int
	// fixed keeps the rate at the ceiling whatever the registry says: the
	// limiter before this one, kept for tests to compare against.
	fixed   bool
	metrics *Metrics
	// maxPause caps a Retry-After pause, as it caps a single wait.
	maxPause time.Duration

	mu     sync.Mutex
	bucket *rate.Limiter
	rate   float64
	// hold caps growth until holdUntil.
	hold      float64
	holdUntil time.Time
	// refused ends the slow start: the host has refused once.
	refused bool
	// queuedAt is when a request last waited for the bucket (zero, long
	// ago: Sub saturates).
	queuedAt time.Time
	// decreasedAt: a refusal of a request sent before it was an answer to
	// the old rate and does not decrease again.
	decreasedAt time.Time
	// pausedUntil: Retry-After, for every request to the host.
	pausedUntil time.Time
	quotas      [numKinds]quotaPace
}

// quotaPace spreads what is left of an announced quota.
type quotaPace struct {
	lim   *rate.Limiter // nil: not pacing
	until time.Time     // pacing ends, unless renewed by later answers
}

func newHostLimiter(host string, ceiling float64, burst int, fixed bool, maxPause time.Duration, m *Metrics) *hostLimiter {
	h := &hostLimiter{host: host, ceiling: ceiling, burst: burst, fixed: fixed, maxPause: maxPause, metrics: m,
		bucket: rate.NewLimiter(rate.Limit(ceiling), burst), rate: ceiling}
	if !fixed && ceiling > startQPS {
		h.rate = startQPS
	}
	h.apply(time.Now())
	return h
}

// reservation is a request's place in the host's queues.
type reservation struct {
	delay time.Duration
	rs    []*rate.Reservation
	at    time.Time
}

func (r reservation) cancel() {
	for _, x := range r.rs {
		x.CancelAt(r.at)
	}
}

// reserve queues a request of kind k at now: after any Retry-After pause,
// then the quota pacing of its kind, then the host's bucket. It returns
// how long the request must wait.
func (h *hostLimiter) reserve(now time.Time, k kind) reservation {
	h.mu.Lock()
	defer h.mu.Unlock()
	at := now
	if h.pausedUntil.After(at) {
		at = h.pausedUntil
	}
	var rs []*rate.Reservation
	q := &h.quotas[k]
	if q.lim != nil && now.After(q.until) {
		q.lim = nil
	}
	if q.lim != nil {
		r := q.lim.ReserveN(at, 1)
		rs = append(rs, r)
		at = at.Add(r.DelayFrom(at))
	}
	r := h.bucket.ReserveN(at, 1)
	rs = append(rs, r)
	if d := r.DelayFrom(at); d > 0 {
		h.queuedAt = now
		at = at.Add(d)
	}
	return reservation{delay: at.Sub(now), rs: rs, at: now}
}

// wait blocks until a request of kind k may be sent, and returns when that
// was. It fails at once when the wait would pass ctx's deadline, or last
// longer than maxPause: a nearly used quota can space requests minutes
// apart, and a reconcile worker is better spent elsewhere meanwhile.
func (h *hostLimiter) wait(ctx context.Context, k kind) (time.Time, error) {
	for {
		now := time.Now()
		r := h.reserve(now, k)
		if r.delay <= 0 {
			return now, nil
		}
		if deadline, ok := ctx.Deadline(); ok && now.Add(r.delay).After(deadline) {
			r.cancel()
			return time.Time{}, fmt.Errorf("%s: the next request allowed by its rate limit is %s away, past the deadline: %w",
				h.host, r.delay.Round(time.Millisecond), context.DeadlineExceeded)
		}
		if r.delay > h.maxPause {
			r.cancel()
			return time.Time{}, fmt.Errorf("%s: the next request allowed by its rate limit is %s away; trying again later",
				h.host, r.delay.Round(time.Second))
		}
		t := time.NewTimer(r.delay)
		select {
		case <-ctx.Done():
			t.Stop()
			r.cancel()
			return time.Time{}, ctx.Err()
		case sent := <-t.C:
			// A refusal may have paused the host while this request
			// waited its turn at the old rate: then it queues again
			// behind the pause rather than draw another refusal.
			if !h.pausedAt(sent) {
				return sent, nil
			}
		}
	}
}

// pausedAt reports whether a Retry-After pause covers t.
func (h *hostLimiter) pausedAt(t time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pausedUntil.After(t)
}

// observe learns from an answer to a request sent at sent: rate-limit
// headers, refusals (429, 503) and health.
func (h *hostLimiter) observe(sent, now time.Time, k kind, resp *http.Response) {
	q := parseQuota(resp.Header, now)
	if q.limit >= 0 {
		h.metrics.QuotaLimit.WithLabelValues(h.host).Set(q.limit)
	}
	if q.remaining >= 0 {
		h.metrics.QuotaRemaining.WithLabelValues(h.host).Set(q.remaining)
	}
	if h.fixed {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pace(now, k, q)
	switch {
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable:
		// Retry-After speaks for the host, not only for the refused
		// request: every request waits it out.
		if wait, ok := httpwait.RetryAfter(resp.Header, now); ok && now.Add(min(wait, h.maxPause)).After(h.pausedUntil) {
			h.pausedUntil = now.Add(min(wait, h.maxPause))
		}
		if sent.After(h.decreasedAt) {
			h.hold = h.rate * holdFraction
			h.rate = max(min(floorQPS, h.ceiling), h.rate*decrease)
			h.hold = max(h.hold, h.rate)
			h.holdUntil = now.Add(holdFor)
			h.decreasedAt = now
			h.refused = true
			h.apply(now)
		}
	case resp.StatusCode < http.StatusInternalServerError && h.rate < h.ceiling && now.Sub(h.queuedAt) <= queuedWithin:
		// Answered, not refused, while requests queue: a 404 or 401
		// says the registry is keeping up as much as a 200.
		limit, step := h.ceiling, growth
		switch {
		case !h.refused:
			step = slowStartGrowth
		case now.Before(h.holdUntil):
			limit = h.hold
		case h.rate >= h.hold && h.rate < 2*h.hold:
			// Past the hold, near where the registry last refused:
			// probe gently, so a steady limit is found again with one
			// refusal rather than overshot by a 10%-a-second climb.
			step = growth / 10
		}
		if h.rate < limit {
			h.rate = min(limit, h.rate+step)
			h.apply(now)
		}
	}
}

// apply sets the bucket to the rate. Its burst shrinks in proportion, and
// to 1 while the rate is held after a refusal: bursts are what empty a
// registry's token bucket, and one that refused us has little to spare.
func (h *hostLimiter) apply(now time.Time) {
	burst := max(1, int(float64(h.burst)*h.rate/h.ceiling))
	if now.Before(h.holdUntil) {
		burst = 1
	}
	h.bucket.SetLimitAt(now, rate.Limit(h.rate))
	h.bucket.SetBurstAt(now, burst)
	h.metrics.Allowed.WithLabelValues(h.host).Set(h.rate)
}

// pace starts, renews or ends the quota pacing of kind k from the quota an
// answer announced. Pacing starts when less than a tenth of the quota is
// left (and ends when a fifth is): the remainder is spread until the reset when the registry says
// when that is, else requests go at 90% of the quota's own rate (limit per
// window), which a sliding window or a token bucket sustains.
func (h *hostLimiter) pace(now time.Time, k kind, q quota) {
	if q.limit <= 0 || q.remaining < 0 {
		return
	}
	p := &h.quotas[k]
	// Pacing starts below a tenth and ends above a fifth: in between, the
	// requests in flight when it started are still being answered.
	if q.remaining >= 2*q.limit*lowQuota || (p.lim == nil && q.remaining >= q.limit*lowQuota) {
		p.lim = nil
		return
	}
	var r float64
	var until time.Time
	switch {
	case q.reset > 0:
		r = max(q.remaining, 1) / q.reset.Seconds()
		until = now.Add(q.reset)
	case q.window > 0:
		r = quotaShare * q.limit / q.window.Seconds()
		until = now.Add(q.window)
	default:
		return // a quota without a time cannot be spread
	}
	p.until = until
	if p.lim != nil {
		p.lim.SetLimitAt(now, rate.Limit(r))
		return
	}
	p.lim = rate.NewLimiter(rate.Limit(r), 1)
	if q.remaining < 1 {
		p.lim.AllowN(now, 1) // nothing left: the first request waits too
	}
}

// quota is what an answer's rate-limit headers announce; -1 where absent.
type quota struct {
	limit, remaining float64
	// window is the quota's period ("w=" of Docker Hub's headers);
	// reset the time until it refills (RateLimit-Reset, X-RateLimit-Reset).
	window, reset time.Duration
}

// parseQuota reads RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset
// (the IETF draft's names, which Docker Hub uses as "100;w=21600"), or
// their X-RateLimit- forms (GitHub's, where Reset is a Unix time).
func parseQuota(h http.Header, now time.Time) quota {
	q := quota{limit: -1, remaining: -1}
	get := func(name string) string {
		if v := h.Get("RateLimit-" + name); v != "" {
			return v
		}
		return h.Get("X-RateLimit-" + name)
	}
	if v, w, ok := quotaValue(get("Limit")); ok {
		q.limit, q.window = v, w
	}
	if v, w, ok := quotaValue(get("Remaining")); ok {
		q.remaining = v
		if q.window == 0 {
			q.window = w
		}
	}
	if v, _, ok := quotaValue(get("Reset")); ok && v > 0 {
		// Seconds from now, or a Unix time when it could only be one.
		if v > 1e9 {
			v -= float64(now.Unix())
		}
		if v > 0 {
			q.reset = time.Duration(v * float64(time.Second))
		}
	}
	return q
}

// quotaValue parses "100", "100;w=21600" or a list "100, 100;w=60" (its
// first element), returning the number and the w= window.
func quotaValue(s string) (float64, time.Duration, bool) {
	s, _, _ = strings.Cut(s, ",")
	num, params, _ := strings.Cut(s, ";")
	v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, 0, false
	}
	var window time.Duration
	for _, p := range strings.Split(params, ";") {
		if k, val, ok := strings.Cut(strings.TrimSpace(p), "="); ok && k == "w" {
			if w, err := strconv.ParseFloat(val, 64); err == nil && w > 0 && w < 1e9 {
				window = time.Duration(w * float64(time.Second))
			}
		}
	}
	return v, window, true
}

// backoff is the wait before retry attempt+1 when the registry gave no
// Retry-After: 500 ms doubling, with jitter so refused callers do not
// return together.
func backoff(attempt int) time.Duration {
	base := 500 * time.Millisecond << min(attempt, 10)
	return base/2 + time.Duration(rand.Int64N(int64(base/2)+1))
}

// politeTransport sends a request through its host's limiter, retries 429
// and 503 after Retry-After (or backoff), and counts requests.
type politeTransport struct {
	client *Client
	host   string
	next   http.RoundTripper
	// requireTLS refuses plain HTTP, so a token realm or pagination link
	// cannot downgrade a registry the user did not mark insecure.
	requireTLS bool
}

func (p *politeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c := p.client
	ctx := req.Context()
	if p.requireTLS && req.URL.Scheme != "https" {
		return nil, fmt.Errorf("refusing plain HTTP to %s: set spec.insecure to allow it", req.URL.Host)
	}
	lim := c.limiter(p.host)
	k := kindOf(req.URL.Path)
	for attempt := 0; ; attempt++ {
		sent, err := lim.wait(ctx, k)
		if err != nil {
			return nil, err
		}
		resp, err := p.next.RoundTrip(req)
		if err != nil {
			c.metrics.Requests.WithLabelValues(p.host, "error").Inc()
			// An HTTP answer to our TLS handshake: the registry speaks
			// plain HTTP, which takes the user's consent.
			var rec tls.RecordHeaderError
			if errors.As(err, &rec) && string(rec.RecordHeader[:]) == "HTTP/" {
				return nil, fmt.Errorf("%s answers plain HTTP to HTTPS: set spec.insecure to allow it", p.host)
			}
			return nil, err
		}
		c.metrics.Requests.WithLabelValues(p.host, strconv.Itoa(resp.StatusCode)).Inc()
		now := time.Now()
		lim.observe(sent, now, k, resp)
		if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
			return resp, nil
		}
		c.metrics.Throttled.WithLabelValues(p.host).Inc()
		// Only requests without a body can be sent again as they are.
		if attempt >= c.MaxRetries || (req.Body != nil && req.GetBody == nil) {
			return resp, nil
		}
		wait, ok := httpwait.RetryAfter(resp.Header, now)
		if !ok || wait == 0 {
			wait = backoff(attempt)
		}
		wait = min(wait, c.MaxBackoff)
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			return nil, fmt.Errorf("%s asks to retry after %s, past the scan's deadline: %w", p.host, wait, context.DeadlineExceeded)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		c.metrics.Retried.WithLabelValues(p.host).Inc()
		if req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			req = req.Clone(ctx)
			req.Body = body
		}
	}
}
