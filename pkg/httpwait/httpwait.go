// Package httpwait reads how long an HTTP server asks its client to wait
// before trying again. The registry client and the forge clients both
// honour it; one reading of the header keeps them agreeing on what a
// server said (seconds or an HTTP date, a date in the past meaning now).
package httpwait

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// RetryAfter reads the Retry-After header of h, in seconds or as an HTTP
// date, as of now. ok is false when the header is missing or unreadable.
func RetryAfter(h http.Header, now time.Time) (wait time.Duration, ok bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}
