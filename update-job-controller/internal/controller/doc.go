// Package controller is the update-job-controller's Kubernetes front end
// over the write-back engine (update-job-controller/engine): it runs
// UpdateJobs, and container-mode jobs' Pods.
//
// The UpdateJob is a kind on the shared reconciler skeleton
// (pkg/runtime/reconcile), its reconcile a list of named phases
// (updatejob_controller.go): pending (a new job waits for a runner),
// expire (a finished job lives out its TTL), turn (whose the job is: a
// Pending one, one this runner claimed but is not running, or one whose
// runner's heartbeat lapsed), limits (activeDeadlineSeconds, attempts,
// backoff), plan, claim, attempt (attempt.go) and record (outcome.go).
//
// Every replica runs jobs; claims, not a leader, keep them apart. Every
// write is guarded by the resourceVersion: the claim is written
// (Scope.Patch) before the attempt starts, so of two replicas racing on a
// job one wins and the other looks again from fresh state. While the
// attempt runs, the claim (claim.go) renews a heartbeat, writes the commit
// it is about to push (status.pushingCommit, which the next attempt finds
// if this runner dies) and finally the outcome, each only while the job is
// still this runner's; it hands what it stored to the skeleton
// (Scope.Stored), whose final write then has nothing to send.
//
// Two kinds of failure, one function that writes them
// (conditions.Record): a job that cannot run (its spec, container mode
// this runner lacks) is a failure of the reconcile, returned by a phase
// and recorded by the skeleton, whose OnFailure ends the job; a failed
// attempt, a deadline or the last attempt used is the job's outcome,
// recorded by the phase that finds it while the reconcile succeeds.
// Counting outcomes, their events and the TTL's deletion follow the
// written status (AfterPatch), so nothing is counted twice.
package controller
