package events

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
)

func TestRedact(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		secrets []string
		want    string
	}{
		{"url password", "fetch https://bot:s3cret@git.example.com/r.git: 403",
			nil, "fetch https://bot:***@git.example.com/r.git: 403"},
		{"url user only is kept", "ssh://git@example.com/r.git", nil, "ssh://git@example.com/r.git"},
		{"bearer token", "GET /v2/: Authorization: Bearer abc.def-ghi", nil, "GET /v2/: Authorization: Bearer ***"},
		{"known values", "token hunter22 rejected, hunter22!", []string{"hunter22"}, "token *** rejected, ***!"},
		{"short values ignored", "a b c", []string{"b"}, "a b c"},
		{"nothing to redact", "found 10 tags", nil, "found 10 tags"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Redact(tt.in, tt.secrets...); got != tt.want {
				t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestRecorderRedactsAndTruncates(t *testing.T) {
	fake := events.NewFakeRecorder(10)
	r := New(fake)
	obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "y"}}

	r.Warning(context.Background(), obj, "AuthenticationFailed", "Scan",
		"auth to https://u:pa55word@r.example.com failed with 100% certainty", "pa55word")
	got := <-fake.Events
	want := "Warning AuthenticationFailed auth to https://u:***@r.example.com failed with 100% certainty"
	if got != want {
		t.Errorf("event = %q, want %q", got, want)
	}

	r.Normal(context.Background(), obj, "Pushed", "Push", strings.Repeat("é", 1000))
	got = <-fake.Events
	note := strings.TrimPrefix(got, "Normal Pushed ")
	if len(note) > maxNoteLength || !strings.HasSuffix(note, "...") {
		t.Errorf("note not truncated to %d bytes: len %d", maxNoteLength, len(note))
	}
	if !strings.HasPrefix(note, "é") || strings.ContainsRune(note, '\uFFFD') {
		t.Errorf("truncation split a UTF-8 sequence")
	}
}
