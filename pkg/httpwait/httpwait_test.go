package httpwait

import (
	"net/http"
	"testing"
	"time"
)

// Retry-After is read in seconds or as an HTTP date (a past date is no
// wait); a missing, negative or unreadable header says nothing.
func TestRetryAfter(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	tests := []struct {
		value string
		want  time.Duration
		ok    bool
	}{
		{"30", 30 * time.Second, true},
		{" 5 ", 5 * time.Second, true},
		{now.Add(90 * time.Second).UTC().Format(http.TimeFormat), 90 * time.Second, true},
		{now.Add(-time.Minute).UTC().Format(http.TimeFormat), 0, true},
		{"", 0, false},
		{"-1", 0, false},
		{"soon", 0, false},
	}
	for _, tt := range tests {
		h := http.Header{}
		if tt.value != "" {
			h.Set("Retry-After", tt.value)
		}
		if got, ok := RetryAfter(h, now); got != tt.want || ok != tt.ok {
			t.Errorf("Retry-After %q = %s, %v; want %s, %v", tt.value, got, ok, tt.want, tt.ok)
		}
	}
}
