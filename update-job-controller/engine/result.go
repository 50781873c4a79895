package engine

import (
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/setters"
)

// Result is what a run did. Commit is empty when nothing was pushed.
type Result struct {
	// CheckoutRevision is the revision the change was made on, e.g.
	// main@sha1:<hash>; empty when the run did not get that far.
	CheckoutRevision string
	Commit           string
	// Message is the commit message, or the pull request's title.
	Message    string
	PushedRefs []string
	// Changes are the setters' changes (not in container mode).
	Changes *setters.Result
	// Problems are files the setters could not read or rewrite; the
	// others were still updated.
	Problems []string
	// Retries counts the non-fast-forward rounds.
	Retries int
	// PullRequest is the request opened, updated, found up to date or
	// closed.
	PullRequest *meta.PullRequestStatus
	// Warnings are what failed on the request after the update was made
	// (labels, reviewers, auto-merge, an edit of its text).
	Warnings []string
	// Discovered is what discovery found.
	Discovered *Discovered
	// Files are what a container changed, relative to the plan's path.
	Files []meta.FileResult
	// Holds are the marked values left as a person set them
	// (writeback.Update.Holds), in file and line order.
	Holds []Hold
}

// Discovered is what a run's discovery found: the images the plan
// includes, as a status records them, each with the policy that set it
// (NAMESPACE:NAME, the first by name when several name it); and how many
// references were skipped.
type Discovered struct {
	Images  []meta.DiscoveredImage
	Skipped int
}
