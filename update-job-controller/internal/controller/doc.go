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
// Jobs of one branch share commits in two ways, both one engine.RunGroup
// (one checkout, commit and push) and both one in-flight group per
// branch (groupKey): a job waits while another of its key runs, here or
// on a runner whose heartbeat is fresh.
//
//   - A runtime group (group.go, groupattempt.go): a job that is ready
//     leads the jobs of its key that are ready with it. Each member is a
//     job of its own: claimed, its heartbeat renewed and its outcome
//     written by the leader's runner, about three writes per member.
//   - A batch job (spec.members, batch.go): the image-automation-
//     controller makes one job for a branch's automations that are ready
//     together, its own update the controlling automation's and each
//     member another's. The members are not jobs: the job's claim,
//     heartbeat and status.pushingCommit are theirs, and its one outcome
//     write holds each member's outcome, r.outcome on the member's View
//     folded into status.members (SetMember): three writes for a batch of
//     any size. A member whose plan cannot work, or whose update fails,
//     fails alone. A batch leads no runtime group and joins none, but
//     waits and is waited for like one. Its attempt resumes from
//     status.pushingCommit the updates of the automations the commit
//     carries (status.carries, written with it); the others run again,
//     so a member is Succeeded only with a commit that carries its
//     change, even when its path holds another's.
//     Once a commit of the batch landed, the batch does not retry (an
//     update's retryable failure is final), so that a member whose change
//     landed is never run again. Before the commit, every update's
//     verified images are read again (checkVerified): one moved tag
//     refuses the commit.
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
