package explain

import (
	"fmt"
	"io"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// How both explanations print times, revisions, lists and conditions.

// writeCondition writes a condition as status, reason: message.
func writeCondition(w io.Writer, label string, c *metav1.Condition) {
	if c == nil {
		fmt.Fprintf(w, "%s\tunknown: no Ready condition yet\n", label)
		return
	}
	fmt.Fprintf(w, "%s\t%s, %s: %s\n", label, c.Status, c.Reason, c.Message)
}

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func formatTimePtr(t *metav1.Time) string {
	if t == nil {
		return "never"
	}
	return formatTime(t.Time)
}

// shortRevision abbreviates a sha256:<hex> scan revision as git does a
// commit.
func shortRevision(rev string) string {
	if algo, hex, ok := strings.Cut(rev, ":"); ok && len(hex) > 12 {
		return algo + ":" + hex[:12]
	}
	return orText(rev, "unknown")
}

func quoteList(list []string) string {
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "(" + strings.Join(q, ", ") + ")"
}

func orText(s, fallback string) string {
	if s == "" {
		return fallback
	}
	return s
}

func refOr(r *meta.ImageRef, fallback string) string {
	if r == nil {
		return fallback
	}
	return r.String()
}

func ptrTo[T any](v T) *T { return &v }
