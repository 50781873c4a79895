package explain

import (
	"fmt"
	"io"
	"slices"
	"strings"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
)

// The ImageUpdateAutomation explanation as text.

func (e *AutomationExplanation) Text(w io.Writer) {
	fmt.Fprintf(w, "ImageUpdateAutomation:\t%s\n", e.Automation)
	if e.Suspended {
		fmt.Fprintf(w, "Suspended:\ttrue: the automation makes no job until resumed\n")
	}
	writeSource(w, e.Source)
	if sf := e.Schedule; sf != nil {
		writeSchedule(w, sf)
	}
	writeDiscovered(w, e.Discovered)
	writeHolds(w, e.Holds)
	if rb := e.Rollback; rb != nil {
		fmt.Fprintf(w, "Rollback:\t%s: %s\n", rb.Reason, rb.Message)
		for _, h := range rb.Health {
			fmt.Fprintf(w, "  %s:\t%s at %s (%s)\n", h.Object, h.State, orText(h.Revision, "no revision"), h.Reason)
		}
	}
	e.writeLastRun(w)
	e.writePolicies(w)
	if j := e.InFlightJob; j != nil {
		fmt.Fprintf(w, "\nUpdateJob in flight:\t%s (%s)\n", j.Name, j.Phase)
	}
	e.writeLastJob(w)
	e.writeMarkers(w)
	if len(e.Problems) > 0 {
		fmt.Fprintf(w, "\nProblems:\n")
		for _, p := range e.Problems {
			fmt.Fprintf(w, "  - %s\n", p)
		}
	}
}

// writeSource writes the automation's repository, and its branch head now
// against the one its last run saw.
func writeSource(w io.Writer, s sourceFacts) {
	fmt.Fprintf(w, "Repository:\t%s (%s)\n", orText(s.URL, "unknown"), s.Describe)
	if s.Ref != "" {
		fmt.Fprintf(w, "  Checkout:\t%s\n", s.Ref)
	}
	fmt.Fprintf(w, "  Update path:\t%s\n", orText(s.UpdatePath, "the repository root"))
	for _, app := range s.Applications {
		fmt.Fprintf(w, "  Application:\t%s/%s, running %s\n", app.Namespace, app.Name, orText(strings.Join(app.Images, ", "), "no images reported yet"))
		for _, src := range app.Sources {
			fmt.Fprintf(w, "    Source %d:\t%s, %s", src.Index, orText(src.Path, "the repository root"), orText(src.Type, "not rendered by Argo CD yet"))
			if src.OverrideFile != "" {
				fmt.Fprintf(w, ", images written to %s", src.OverrideFile)
			}
			fmt.Fprintln(w)
		}
	}
	for _, t := range s.Targets {
		fmt.Fprintf(w, "  Target:\t%s (%s), Applications %s\n", t.URL, t.Branch, orText(strings.Join(t.Applications, ", "), "none"))
		fmt.Fprintf(w, "    Last push:\t%s\n", orText(t.LastPushCommit, "none yet"))
		fmt.Fprintf(w, "    Ready:\t%s\n", orText(t.Ready, "not run yet"))
	}
	if s.Head != "" {
		fmt.Fprintf(w, "  Branch head:\t%s (listed now)\n", s.Head)
	} else {
		fmt.Fprintf(w, "  Branch head:\tunknown: %s\n", s.HeadError)
	}
	switch {
	case s.ObservedRevision == "":
		fmt.Fprintf(w, "  Last run saw:\tnothing recorded yet\n")
	case s.Head == "":
		fmt.Fprintf(w, "  Last run saw:\t%s\n", s.ObservedRevision)
	case s.Head == s.ObservedRevision:
		fmt.Fprintf(w, "  Last run saw:\t%s: the same, nothing was pushed since\n", s.ObservedRevision)
	default:
		fmt.Fprintf(w, "  Last run saw:\t%s: the branch moved since; the next run looks again\n", s.ObservedRevision)
	}
}

// writeDiscovered writes the images spec.discover found, each with the
// policy that follows it or why none does.
func writeDiscovered(w io.Writer, discovered []imagev1.DiscoveredImage) {
	if len(discovered) == 0 {
		return
	}
	fmt.Fprintf(w, "Discovered images:\t%d (spec.discover)\n", len(discovered))
	for _, d := range discovered {
		switch {
		case d.Reason != "":
			fmt.Fprintf(w, "  %s:%s\t%d locations, not followed: %s\n", d.Name, d.Tag, d.Locations, d.Reason)
		case d.Owned:
			fmt.Fprintf(w, "  %s:%s\t%d locations, ImagePolicy %s (made by the automation)\n", d.Name, d.Tag, d.Locations, d.Policy)
		default:
			fmt.Fprintf(w, "  %s:%s\t%d locations, ImagePolicy %s (the namespace's own)\n", d.Name, d.Tag, d.Locations, d.Policy)
		}
	}
}

// writeHolds writes the values a person set that the automation leaves,
// and what ends each hold.
func writeHolds(w io.Writer, holds []imagev1.AutomationHold) {
	if len(holds) == 0 {
		return
	}
	fmt.Fprintf(w, "Holds:\t%d (status.holds)\n", len(holds))
	for _, h := range holds {
		fmt.Fprintf(w, "  %s line %d, %s:\t%s (%s)\n", h.Path, h.Line, h.Setter, h.Value, h.Reason)
		fmt.Fprintf(w, "    Set by:\t%s in %s at %s, over %s\n", orText(h.Author, "unknown"), h.Commit, formatTimePtr(h.Since), orText(h.From, "unknown"))
		if h.Want != "" {
			fmt.Fprintf(w, "    Not written:\t%s\n", h.Want)
		}
		if h.Message != "" {
			fmt.Fprintf(w, "    Why:\t%s\n", h.Message)
		}
	}
}

// writeLastRun writes when the automation last ran and pushed, its last
// pull request, and its Ready condition.
func (e *AutomationExplanation) writeLastRun(w io.Writer) {
	fmt.Fprintf(w, "Last run:\t%s\n", formatTimePtr(e.LastRunTime))
	if e.LastPushCommit != "" {
		to := ""
		// A request's job pushes to the head branch, not the checkout
		// branch the lines above are about.
		if pr := e.LastPullRequest; pr != nil && pr.HeadCommit == e.LastPushCommit {
			to = " to the pull request's head branch"
		}
		fmt.Fprintf(w, "Last push:\t%s%s at %s\n", e.LastPushCommit, to, formatTimePtr(e.LastPushTime))
	}
	if pr := e.LastPullRequest; pr != nil {
		writeLastPullRequest(w, pr)
	}
	writeCondition(w, "Ready:", e.Ready)
}

// writePolicies writes the selected policies' table: latest image, the
// one the last run applied, and their markers.
func (e *AutomationExplanation) writePolicies(w io.Writer) {
	what := "all ImagePolicies of the namespace"
	if e.PolicySelector != "" {
		what = "ImagePolicies matching " + e.PolicySelector
	}
	fmt.Fprintf(w, "\nPolicies (%s):\n", what)
	if len(e.Policies) == 0 {
		fmt.Fprintln(w, "  none")
		return
	}
	fmt.Fprintf(w, "  POLICY\tLATEST IMAGE\tAPPLIED BY THE LAST RUN\tSTATE\tMARKERS\n")
	for _, p := range e.Policies {
		markers := "unknown"
		if p.Markers != nil {
			markers = fmt.Sprint(*p.Markers)
			if len(p.Files) > 0 {
				markers += " (" + strings.Join(p.Files, ", ") + ")"
			}
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\t%s\n", p.Policy, refOr(p.LatestRef, "none"), refOr(p.Applied, "none"), p.State, markers)
	}
}

// writeLastJob writes the last finished UpdateJob: what it checked out,
// pushed and changed.
func (e *AutomationExplanation) writeLastJob(w io.Writer) {
	j := e.LastJob
	if j == nil {
		fmt.Fprintf(w, "\nLast job:\tnone finished yet\n")
		return
	}
	fmt.Fprintf(w, "\nLast job:\t%s (%s)\n", j.Name, j.Phase)
	if j.Error != "" {
		fmt.Fprintf(w, "  Job:\t%s\n", j.Error)
	}
	if j.CompletionTime != nil {
		fmt.Fprintf(w, "  Finished:\t%s\n", formatTime(j.CompletionTime.Time))
	}
	if j.CheckoutRevision != "" {
		fmt.Fprintf(w, "  Checked out:\t%s\n", j.CheckoutRevision)
	}
	if j.PushedCommit != "" {
		fmt.Fprintf(w, "  Pushed:\t%s to %s\n", j.PushedCommit, strings.Join(j.PushedRefs, ", "))
	}
	writeCondition(w, "  Ready:", j.Ready)
	if len(j.Changes) == 0 {
		return
	}
	fmt.Fprintf(w, "  Changes:\n")
	for _, f := range j.Changes {
		for _, o := range f.Objects {
			for _, ch := range o.Changes {
				fmt.Fprintf(w, "    %s %s/%s/%s: %s -> %s (%s)\n", e.inRepository(f.Path)[0], o.Kind, o.Namespace, o.Name, ch.OldValue, ch.NewValue, ch.Setter)
			}
		}
	}
}

// writeMarkers writes where the markers were read, the policies they name
// with what is wrong with each, and, after a scan, what a run would change.
func (e *AutomationExplanation) writeMarkers(w io.Writer) {
	m := e.Markers
	if m.From == "" {
		fmt.Fprintf(w, "\nMarkers:\tunknown: no finished UpdateJob recorded them; --scan-checkout DIR finds them in a local checkout\n")
	} else {
		fmt.Fprintf(w, "\nMarkers (from %s):\n", m.From)
	}
	found := slices.ContainsFunc(m.Policies, func(en markerEntry) bool { return en.Count == nil || *en.Count > 0 })
	if !found && m.Complete {
		fmt.Fprintln(w, "  none found")
	} else if found {
		writeMarkerTable(w, m.Policies)
	}
	if m.Omitted > 0 {
		fmt.Fprintf(w, "  (%d more policies, not listed in the job's status)\n", m.Omitted)
	}
	if len(m.WouldChange) > 0 {
		fmt.Fprintf(w, "  A run would change:\n")
		for _, c := range m.WouldChange {
			fmt.Fprintf(w, "    %s\n", c)
		}
	}
	for _, p := range m.ScanProblems {
		fmt.Fprintf(w, "  Not read: %s\n", p)
	}
}

// writeMarkerTable writes the policies markers name, with how many, where
// and what is wrong.
func writeMarkerTable(w io.Writer, entries []markerEntry) {
	fmt.Fprintf(w, "  POLICY\tMARKERS\tWHERE\tPROBLEM\n")
	for _, en := range entries {
		if en.Count != nil && *en.Count == 0 {
			continue // a setter no marker names: see the policies and problems
		}
		count := "some"
		if en.Count != nil {
			count = fmt.Sprint(*en.Count)
		}
		problem := orText(en.Problem, "-")
		if en.AppliedBy != "" {
			problem = "- (applied by automation " + en.AppliedBy + ")"
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\t%s\n", en.Policy, count, orText(strings.Join(en.Files, ", "), "-"), problem)
	}
}

// writeSchedule writes where the automation stands in its update windows.
func writeSchedule(w io.Writer, sf *scheduleFacts) {
	if sf.Windows != "" {
		fmt.Fprintf(w, "Update windows:\t%s\n", sf.Windows)
	}
	switch {
	case sf.Error != "":
		fmt.Fprintf(w, "  Now:\tinvalid: %s\n", sf.Error)
	case sf.Open:
		fmt.Fprintf(w, "  Now:\topen until %s: changes get an UpdateJob\n", formatTime(sf.End.Time))
	default:
		fmt.Fprintf(w, "  Now:\tclosed: no UpdateJob until the next window, %s to %s (a job already running is left to finish)\n",
			formatTime(sf.Start.Time), formatTime(sf.End.Time))
	}
}

// writeLastPullRequest writes an automation's last pull request. Its state
// is the one the job saw: explain asks no forge, so a request merged or
// closed by hand since still shows open.
func writeLastPullRequest(w io.Writer, pr *meta.PullRequestStatus) {
	fmt.Fprintf(w, "Last pull request:\t#%d %s\n", pr.Number, pr.URL)
	state := fmt.Sprintf("%s when its job finished", pr.State)
	if pr.State == meta.PullRequestOpen {
		// The automation makes no job while the base and the policies
		// are as they were, so a request closed unmerged since waits.
		state += " (explain asks no forge; closed unmerged since, it is proposed again only once the base branch or a policy changes)"
	}
	fmt.Fprintf(w, "  State:\t%s\n", state)
	fmt.Fprintf(w, "  Action:\t%s\n", explainPullRequestAction(pr.Action))
	head := pr.HeadBranch
	if pr.HeadCommit != "" {
		head += " at " + pr.HeadCommit[:min(len(pr.HeadCommit), 7)]
	}
	fmt.Fprintf(w, "  Head branch:\t%s\n", head)
}

// explainPullRequestAction says what a job did to its request, and why.
func explainPullRequestAction(a meta.PullRequestAction) string {
	switch a {
	case meta.PullRequestOpened:
		return "opened"
	case meta.PullRequestUpdated:
		return "updated: a new commit on the head branch, or a new title or description"
	case meta.PullRequestUnchanged:
		return "unchanged: it already proposed the policies' values"
	case meta.PullRequestClosedNow:
		return "closed: the base branch already had the policies' values"
	}
	return string(a)
}
