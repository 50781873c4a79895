// Package engine is image-toolkit's write-back: it runs a writeback.Plan
// against a repository — fetch into a mirror, check out, change the files
// (the image setters, or a front end's container), commit, sign, and push
// or propose a pull request — and says what it did. On a non-fast-forward
// push it starts again from the new head, a bounded number of times.
//
// The engine knows nothing of Kubernetes: no API types, no client, no
// conditions, and it links none (tests/deps checks with go list -deps that
// the engine and its mirror import nothing of k8s.io or controller-runtime
// beyond the kube-openapi types kyaml brings itself, and no forge's client
// library). A front end turns its own input into a Plan (the
// update-job-controller with pkg/writeback/jobplan, tk-image from its
// flags), gives a CredentialsStore, registers the forges it proposes on
// (pkg/forge.Register; update-job-controller/forges has the built-in
// ones), and maps the Result and errors back into its own terms. This is the shape of the GitOps engine proposal (seed 002):
// one subsystem with a small API, customised through callbacks, so that
// more than one front end can use it. Example embeds it in 50 lines; the
// update-job-controller (internal/controller) and tk-image update
// --repository are its front ends.
//
// # Design
//
//   - An Engine is cheap: New stores its arguments. The mirror.Cache is
//     what is shared and costly, so a front end that serves many jobs
//     keeps one Cache. Credentials come from a CredentialsStore asked
//     with the repository before each fetch and push, so one Engine can
//     serve repositories with different credentials; a Credentials value
//     is the store of one set. A front end whose hooks differ per job
//     makes an Engine per job (the update-job-controller does).
//   - Hooks are plain function fields, not registrations: a run has one
//     caller, and nil means "nothing to do". They are where a front end
//     keeps its own state in step with the run: BeforePush lets the
//     update-job-controller check that it still owns the job and record
//     the commit it is about to push (so that a runner killed after the
//     push still finds it, through Plan.Resume); Container runs a
//     container-mode update in a Pod; BeforeCommit may change or veto
//     the change; OnEvent feeds metrics and logs.
//   - Failures are *Error with a Kind (invalid plan, git, authentication,
//     update, pull request, rate limit) and whether retrying can help.
//     The engine does not choose condition reasons: a front end maps
//     Kinds to its own in one place (the update-job-controller to its
//     conditions' reasons, tk-image to exit messages). Errors from hooks
//     are returned as they are.
//   - Check validates what a Plan needs beyond writeback's own checks
//     (the forge, the templates) without any network call, so that a
//     controller can refuse a job before claiming it.
package engine
