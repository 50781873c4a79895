package events

import (
	"fmt"
	"strings"

	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/writeback/jobplan"
)

// Metadata keys of image-toolkit's events, for WithMetadata. Where Flux has
// a key for the same thing (github.com/fluxcd/pkg/apis/event), it is
// Flux's, so that its providers read it: revision is what a git commit
// status provider reads, commit what newer ones prefer. The forwarder adds
// the API group prefix.
const (
	// MetaRevision is a git revision as Flux writes it,
	// <branch>@sha1:<hash>: the commit pushed, else the one an update
	// started from.
	MetaRevision = "revision"
	// MetaCommit is the hash of the commit pushed.
	MetaCommit = "commit"
	// MetaPullRequest is the web address of the pull request an update
	// opened, updated or closed.
	MetaPullRequest = "pullRequest"
	// MetaChanges lists the values an update replaced, "old → new", one a
	// line.
	MetaChanges = "changes"
	// MetaPreviousImage and MetaLatestImage are an ImagePolicy's image
	// before and after it changed (name:tag, @digest when known).
	MetaPreviousImage = "previousImage"
	MetaLatestImage   = "latestImage"
)

// maxChanges bounds MetaChanges: an update of a hundred files stays a
// readable chat message.
const maxChanges = 10

// UpdateJobMetadata is the metadata of an event about what an UpdateJob
// did, from its status: the commit it pushed (or the revision it started
// from), its pull request, and the values it replaced. The
// update-job-controller's events about the job and the
// image-automation-controller's about its automation carry the same.
func UpdateJobMetadata(job *updatev1.UpdateJob) map[string]string {
	st := &job.Status
	md := map[string]string{}
	switch {
	case st.PushedCommit != "":
		md[MetaCommit] = st.PushedCommit
		if branch := pushedTo(job); branch != "" {
			md[MetaRevision] = formatRevision(branch, st.PushedCommit)
		}
	case st.CheckoutRevision != "":
		md[MetaRevision] = st.CheckoutRevision
	}
	if pr := st.PullRequest; pr != nil && pr.URL != "" {
		md[MetaPullRequest] = pr.URL
	}
	if c := changes(st.Result); c != "" {
		md[MetaChanges] = c
	}
	return md
}

// pushedTo is where the job pushed its commit, as its plan says (the one
// answer to where a job pushes): the push branch, else the refspec's
// destination, else the pull request's head branch, which the engine
// names only when it runs and the status records.
func pushedTo(job *updatev1.UpdateJob) string {
	plan, err := jobplan.FromJob(job)
	if err != nil {
		return ""
	}
	if plan.Target.PullRequest != nil && job.Status.PullRequest != nil {
		return job.Status.PullRequest.HeadBranch
	}
	if refs := plan.Target.Refs(); len(refs) > 0 {
		return strings.TrimPrefix(refs[0], "refs/heads/")
	}
	return ""
}

// formatRevision writes a commit as git.FormatRevision does, and as the
// jobs' status fields and Flux do: <branch>@sha1:<hash>, sha256 for a
// 64-digit hash. pkg/git is not imported for it: it would link an SSH
// client into the image-reflector-controller. A test holds the two equal.
func formatRevision(branch, hash string) string {
	format := "sha1"
	if len(hash) == 64 {
		format = "sha256"
	}
	return branch + "@" + format + ":" + hash
}

// changes lists each distinct replacement once, in the order of the
// result: one image is often set in many files.
func changes(res *updatev1.UpdateResult) string {
	if res == nil {
		return ""
	}
	seen := map[string]bool{}
	var lines []string
	for _, f := range res.Files {
		for _, o := range f.Objects {
			for _, c := range o.Changes {
				l := c.OldValue + " → " + c.NewValue
				if !seen[l] {
					seen[l] = true
					lines = append(lines, l)
				}
			}
		}
	}
	if len(lines) > maxChanges {
		more := len(lines) - maxChanges
		lines = append(lines[:maxChanges], fmt.Sprintf("and %d more", more))
	}
	return strings.Join(lines, "\n")
}
