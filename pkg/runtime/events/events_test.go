package events

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	ns := env.Namespace(t)
	r := New(newWriter(t, nil))
	obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: ns}}

	r.Warning(context.Background(), obj, "AuthenticationFailed", "Scan",
		"auth to https://u:pa55word@r.example.com failed with 100% certainty", "pa55word")
	got := eventsIn(t, ns)
	want := "auth to https://u:***@r.example.com failed with 100% certainty"
	if len(got) != 1 || got[0].Type != corev1.EventTypeWarning || got[0].Reason != "AuthenticationFailed" || got[0].Note != want {
		t.Fatalf("events %+v, want a warning noting %q", got, want)
	}

	obj.Name = "y"
	r.Normal(context.Background(), obj, "Pushed", "Push", strings.Repeat("é", 1000))
	var note string
	for _, e := range eventsIn(t, ns) {
		if e.Reason == "Pushed" {
			note = e.Note
		}
	}
	if len(note) > maxNoteLength || !strings.HasSuffix(note, "...") {
		t.Errorf("note not truncated to %d bytes: len %d", maxNoteLength, len(note))
	}
	if !strings.HasPrefix(note, "é") || strings.ContainsRune(note, '\uFFFD') {
		t.Errorf("truncation split a UTF-8 sequence")
	}
}
