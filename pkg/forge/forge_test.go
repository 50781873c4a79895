package forge

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// RetryAfter reads Retry-After in seconds or as a date, else the reset
// time GitHub (X-RateLimit-Reset) or GitLab (RateLimit-Reset) sends.
func TestRetryAfter(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	tests := []struct {
		header, value string
		want          time.Duration
	}{
		{"Retry-After", "30", 30 * time.Second},
		{"Retry-After", now.Add(90 * time.Second).UTC().Format(http.TimeFormat), 90 * time.Second},
		{"X-RateLimit-Reset", "1700000120", 2 * time.Minute},
		{"RateLimit-Reset", "1700000005", 5 * time.Second},
		{"X-RateLimit-Reset", "1600000000", 0},
		{"Retry-After", "soon", 0},
	}
	for _, tt := range tests {
		resp := &http.Response{Header: http.Header{}}
		resp.Header.Set(tt.header, tt.value)
		if got := RetryAfter(resp, now); got != tt.want {
			t.Errorf("%s: %s = %s, want %s", tt.header, tt.value, got, tt.want)
		}
	}
}

// A rate-limited response with a short wait is sent again after the wait,
// body and all; one with a long wait is handed back at once, and NewError
// turns it into an Error that says when to retry; the token never shows.
func TestLimiter(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		n := calls.Add(1)
		switch {
		case r.URL.Path == "/short" && n == 1:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		case r.URL.Path == "/short":
			io.WriteString(w, "got "+string(body))
		default:
			w.Header().Set("X-RateLimit-Remaining", "0")
			w.Header().Set("X-RateLimit-Reset", "9999999999")
			w.WriteHeader(http.StatusForbidden)
		}
	}))
	defer srv.Close()
	var observed []int
	hc := Wrap(srv.Client(), Options{MaxRateLimitWait: 5 * time.Second, OnResponse: func(_ string, s int) { observed = append(observed, s) }})

	start := time.Now()
	resp, err := hc.Post(srv.URL+"/short", "text/plain", strings.NewReader("payload"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "got payload" || time.Since(start) < 900*time.Millisecond {
		t.Errorf("retried response %q after %s", b, time.Since(start))
	}
	if len(observed) != 2 || observed[0] != 429 || observed[1] != 200 {
		t.Errorf("observed %v, want [429 200]", observed)
	}

	calls.Store(0)
	start = time.Now()
	resp, err = hc.Get(srv.URL + "/long")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if calls.Load() != 1 || time.Since(start) > 2*time.Second {
		t.Errorf("long wait: %d calls in %s, want 1 at once", calls.Load(), time.Since(start))
	}
	err = NewError("github", "listing pull requests", resp, errors.New("API rate limit exceeded for token tok-123"), "tok-123")
	var fe *Error
	if !errors.As(err, &fe) || !fe.RateLimited() || fe.RetryAfter < time.Hour || strings.Contains(err.Error(), "tok-123") {
		t.Errorf("err = %v", err)
	}
}

// A cancelled context ends a rate-limit wait at once.
func TestLimiterHonoursContext(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	hc := Wrap(srv.Client(), Options{MaxRateLimitWait: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	start := time.Now()
	_, err := hc.Do(req)
	if err == nil || time.Since(start) > 5*time.Second {
		t.Errorf("err = %v after %s", err, time.Since(start))
	}
}

// Error says what the forge answered, and what a 404 or 403 usually means.
func TestErrorMessages(t *testing.T) {
	tests := []struct {
		status int
		want   string
	}{
		{401, "github: opening the request: 401 Unauthorized: Bad credentials"},
		{404, "(the repository or request does not exist, or the token cannot see it)"},
		{403, "(the token lacks a permission or scope this needs)"},
	}
	for _, tt := range tests {
		err := NewError("github", "opening the request", &http.Response{StatusCode: tt.status, Header: http.Header{}}, errors.New("Bad credentials"), "")
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%d: %v, want %q", tt.status, err, tt.want)
		}
	}
	var fe *Error
	err := NewError("gitlab", "x", &http.Response{StatusCode: 401, Header: http.Header{}}, errors.New("401"), "")
	if !errors.As(err, &fe) || !fe.Unauthorized() {
		t.Errorf("401 is not Unauthorized: %v", err)
	}
	if err := NewError("gitea", "x", nil, context.DeadlineExceeded, ""); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a timeout is not kept: %v", err)
	}
}
