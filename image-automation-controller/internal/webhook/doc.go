// Package webhook receives git hosts' push events and runs the
// ImageUpdateAutomations whose checkout branch was pushed at once, instead
// of at their next interval: a person edits a file or merges a pull
// request, and the automation looks at the new head within a second. It is
// the GitWebhook kind of pkg/receiver, which serves the calls (paths,
// authentication, limits, the 202 answer); this package reads what each
// sender's payload names and what that triggers.
//
// The design, and why:
//
//   - The push is a trigger, not a source of truth: a matching automation
//     is asked to run (the reconcile-request annotation its reconciler
//     already honours) and reads the branch head itself. If the head is
//     what it last saw (the push was its own commit), the run ends at once
//     without an UpdateJob.
//   - An automation matches when its repository is the one pushed, however
//     either URL is spelled (gitsource.RepositoryKey: https, ssh and scp-like URLs of
//     one repository are equal), and the branch pushed is its checkout
//     branch. Automations checking out a tag, a semver range or a commit
//     are not triggered: a branch push does not move them.
//   - Only the webhook's namespace, and within it the automations its
//     selector picks, can be triggered: a webhook never reaches another
//     team's automations.
package webhook
