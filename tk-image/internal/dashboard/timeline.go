package dashboard

import (
	"fmt"
	"slices"
	"strings"
	"time"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
)

// TimelineEntry is one thing that happened to an automation's images: a
// commit or pull request (from → to), a revert, a hold set, a failure or
// another event, at its time.
type TimelineEntry struct {
	Time time.Time
	// Kind is one word: commit, pull request, revert, hold, warning,
	// event.
	Kind string
	Text string
	// Commit and CommitURL are the commit it made, when it made one.
	Commit, CommitURL string
	PullRequest       int
}

// maxTimeline bounds the entries the Automation page lists.
const maxTimeline = 40

// timelineOf merges what an automation's status and events say happened,
// newest first: its pushes (status.history), its revert (status.rollback),
// the holds people set (status.holds), and its events but those that say
// a push again (the history has them, with from → to).
func timelineOf(a *imagev1.ImageUpdateAutomation, history []HistoryRow, events []EventRow) []TimelineEntry {
	var out []TimelineEntry
	for _, h := range history {
		e := TimelineEntry{Time: h.Time, Kind: "commit", Commit: h.Commit, CommitURL: h.CommitURL, PullRequest: h.PullRequest}
		if h.PullRequest > 0 {
			e.Kind = "pull request"
		}
		var parts []string
		for _, img := range h.Images {
			if img.From != "" {
				parts = append(parts, fmt.Sprintf("%s %s → %s", img.Policy, img.From, img.Tag))
			} else {
				parts = append(parts, fmt.Sprintf("%s → %s", img.Policy, img.Tag))
			}
		}
		if h.MoreImages > 0 {
			parts = append(parts, fmt.Sprintf("and %d more", h.MoreImages))
		}
		e.Text = strings.Join(parts, ", ")
		out = append(out, e)
	}
	if rb := a.Status.Rollback; rb != nil && rb.Reason == imagev1.RolledBackReason && rb.PushedAt != nil {
		out = append(out, TimelineEntry{Time: rb.PushedAt.Time, Kind: "revert", Text: rb.Message, Commit: rb.Commit})
	}
	for _, h := range a.Status.Holds {
		if h.Since == nil {
			continue
		}
		text := fmt.Sprintf("%s held %s at %s", orText(h.Author, "a person"), h.Path, h.Value)
		if h.Reason != imagev1.HeldByPersonReason {
			text += " (" + h.Reason + ")"
		}
		out = append(out, TimelineEntry{Time: h.Since.Time, Kind: "hold", Text: text})
	}
	for _, ev := range events {
		if ev.Reason == "Pushed" || ev.Reason == imagev1.RolledBackReason {
			continue
		}
		kind := "event"
		if ev.Type == "Warning" {
			kind = "warning"
		}
		text := ev.Reason + ": " + ev.Message
		if ev.Count > 1 {
			text += fmt.Sprintf(" (×%d)", ev.Count)
		}
		out = append(out, TimelineEntry{Time: ev.Last, Kind: kind, Text: text})
	}
	slices.SortStableFunc(out, func(x, y TimelineEntry) int { return y.Time.Compare(x.Time) })
	if len(out) > maxTimeline {
		out = out[:maxTimeline]
	}
	return out
}
