// Package controller holds the image-automation-controller's reconcilers:
// ImageUpdateAutomation, which decides when a repository needs an update
// and makes an UpdateJob for it, and GitWebhook.
//
// The automation is a kind on the shared reconciler skeleton
// (pkg/runtime/reconcile), and its run is a list of named phases in three
// parts (phases.go):
//
//   - read: the spec and update window, the source and its credentials,
//     the namespace's ImagePolicies, the automation's jobs (recording a
//     finished one once), the objects discovery keeps, the policies it
//     applies (pkg/selection), spec.rollback's judgement of its last
//     commit (rollback.go, pkg/rollback), the holds and what ends them
//     (holds.go, pkg/hold: a rollback's hold makes the held image its
//     policy's setter, so a revert is an ordinary job) and the branch
//     head;
//   - decide: a pure function of the spec, the status and what was read
//     (decide.go), the whole decision table in one place, tested without
//     an API server: wait for the job in flight, skip a run where nothing
//     changed, wait for the interval or the update window, or make a job;
//   - carry out: make the job (taking turns with automations that set the
//     same policies on the same branch), or adopt one made before.
//
// Every failure a phase returns takes the skeleton's one path to the
// conditions; the phases set only progress and success. The status is
// written once, with an optimistic lock: a run whose write conflicts runs
// again from fresh state, and counting its outcome and pruning old jobs
// happen only after the write (AfterPatch), so nothing is counted twice.
package controller
