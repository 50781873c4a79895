package v1beta1

// Condition reasons of ImageRepository and ImagePolicy, beside the shared
// ones in pkg/runtime/conditions.
const (
	// ImageURLInvalidReason: spec.image is not a repository reference (it
	// has a tag, a digest or a scheme other than http(s), or does not
	// parse), or not a Helm chart URL (http(s)://REPOSITORY/CHART).
	ImageURLInvalidReason = "ImageURLInvalid"
	// InvalidExclusionListReason: an exclusionList entry is not a regexp.
	InvalidExclusionListReason = "InvalidExclusionList"
	// ScanFailedReason: listing the tags failed; it is retried.
	ScanFailedReason = "ScanFailed"
	// InvalidHelmIndexReason: a Helm repository's index.yaml does not
	// parse, has no apiVersion, or is larger than the cap; it is retried,
	// since the repository may publish a good one.
	InvalidHelmIndexReason = "InvalidHelmIndex"
	// ChartNotFoundReason: the Helm repository's index does not list the
	// chart; it is retried, since the chart may be published later.
	ChartNotFoundReason = "ChartNotFound"
	// InvalidPolicyReason: a semver range or filter regexp does not parse.
	InvalidPolicyReason = "InvalidPolicy"
	// DowngradeHeldReason: the latest scan does not list latestRef's tag
	// and the best tag it lists ranks lower; latestRef stays until
	// DowngradeScans consecutive scans lack it (status.heldRef).
	DowngradeHeldReason = "DowngradeHeld"
	// NoMatchingTagReason: no tag passed the filter and the policy.
	NoMatchingTagReason = "NoMatchingTag"
	// DigestLookupFailedReason: the digest of the selected tag could not be
	// read; it is retried.
	DigestLookupFailedReason = "DigestLookupFailed"
	// PlatformNotFoundReason: the chosen tag has no manifest for
	// spec.platform; it is retried, since a new tag or a new scan can
	// bring one.
	PlatformNotFoundReason = "PlatformNotFound"
	// BuildTimeLookupFailedReason: the image config of a candidate, whose
	// build time minimumAge (source created) or newestBuild needs, could
	// not be read; it is retried.
	BuildTimeLookupFailedReason = "BuildTimeLookupFailed"
	// SignatureVerificationFailedReason: spec.verify is set and a better
	// candidate than latestRef did not verify (status.unverifiedRef says
	// which and why); latestRef is the best candidate that did (Ready
	// stays True: the policy is doing what it was told).
	SignatureVerificationFailedReason = "SignatureVerificationFailed"
	// NoVerifiedCandidateReason: spec.verify is set and no candidate's
	// signature verified; latestRef is not changed. It is checked again
	// on the next scan, and after --verify-retry for signatures attached
	// later.
	NoVerifiedCandidateReason = "NoVerifiedCandidate"
	// InvalidVerificationReason: spec.verify's Secret or ConfigMap is
	// missing or holds keys, certificates, a trusted root or a trust
	// policy that do not parse; it is retried, since the user can fix them.
	InvalidVerificationReason = "InvalidVerification"
	// MinimumAgeNotReachedReason: every candidate is younger than
	// minimumAge and the policy has no earlier choice to keep;
	// status.pendingRef says which tag comes first and when.
	MinimumAgeNotReachedReason = "MinimumAgeNotReached"
	// UpstreamNotHealthyReason: a promotion's upstream image is not (yet)
	// running healthy in every healthOf object at a revision holding it;
	// status.pendingRef says which image waits, status.promotion.health
	// why.
	UpstreamNotHealthyReason = "UpstreamNotHealthy"
	// RemoteClusterUnreachableReason: a healthOf object of another
	// cluster (kubeConfig) could not be read, the API server unreachable
	// or not answering; recorded as that object's health reason, with the
	// error, and the promotion waits (UpstreamNotHealthy).
	RemoteClusterUnreachableReason = "RemoteClusterUnreachable"
	// SoakNotElapsedReason: the upstream runs the image healthy, but not
	// for spec.policy.promotion.soak yet; status.pendingRef says when.
	SoakNotElapsedReason = "SoakNotElapsed"
	// AwaitingApprovalReason: a promotion with approval Required found
	// its upstream image healthy and soaked, and no approval of its
	// digest; status.pendingRef says which image waits, and the message
	// how to approve it.
	AwaitingApprovalReason = "AwaitingApproval"
	// PromotionGroupWaitingReason: a promotion could move, but another
	// promotion policy of the same upstream automation, whose image the
	// same upstream commit holds, cannot yet (its health, soak or
	// approval); status.promotion.group says which and why. They move
	// together.
	PromotionGroupWaitingReason = "PromotionGroupWaiting"
	// PromotionCycleReason: following promotions upstream comes back to
	// this policy; nothing can ever be promoted.
	PromotionCycleReason = "PromotionCycle"
)

// Condition reasons of ImageUpdateAutomation, beside the shared ones
// (AccessDenied, InvalidSpec, DependencyNotReady, ...) and the UpdateJob
// reasons a failed job reports, which the automation repeats.
const (
	// InvalidMessageTemplateReason: the commit message template does not
	// parse, uses fields the data lacks, or does not render.
	InvalidMessageTemplateReason = "InvalidMessageTemplate"
	// InvalidPolicySelectorReason: spec.policySelector is not a valid label
	// selector.
	InvalidPolicySelectorReason = "InvalidPolicySelector"
	// UnsupportedUpdateStrategyReason: spec.update.strategy is not Setters
	// or ArgoCD, or ArgoCD without an Application source.
	UnsupportedUpdateStrategyReason = "UnsupportedUpdateStrategy"
	// TargetRevisionNotBranchReason: the Application's targetRevision is a
	// tag, a semver range or a commit, which a write-back cannot push to.
	TargetRevisionNotBranchReason = "TargetRevisionNotBranch"
	// SourceNotFoundReason: the GitRepository of spec.sourceRef, or its
	// kind, does not exist.
	SourceNotFoundReason = "SourceNotFound"
	// InvalidSourceReason: the GitRepository cannot be used as written
	// (no or unsupported URL, a cloud provider, an unknown API group).
	InvalidSourceReason = "InvalidSource"
	// InvalidSecretReason: a Secret lacks the keys its URL needs, or holds
	// a key or certificate that does not parse.
	InvalidSecretReason = "InvalidSecret"
	// InvalidScheduleReason: spec.schedule has a cron expression or time
	// zone that does not parse, or a window that never opens.
	InvalidScheduleReason = "InvalidSchedule"
	// OutsideUpdateWindowReason: something changed, but no update window
	// is open; the job is made when the next one opens (Ready=True: the
	// automation is doing what it was told).
	OutsideUpdateWindowReason = "OutsideUpdateWindow"
)

// Reasons of an automation's holds (status.holds[].released and the
// job's result): why a marked value a person set is left as it is, or no
// longer.
const (
	// HeldByPersonReason: a commit the automation did not make replaced
	// the value it had written (a hand rollback or pin); the value is left
	// as it is while the hold lasts.
	HeldByPersonReason = "HeldByPerson"
	// HeldWithGroupReason: the value belongs to a promotion group one of
	// whose other values is held (heldWith names it); it is left too, so
	// that what ran together upstream stays together, and moves when
	// that hold ends.
	HeldWithGroupReason = "HeldWithGroup"
	// HoldReleasedReason: tk-image release or the release-holds
	// annotation released the hold.
	HoldReleasedReason = "HoldReleased"
	// HoldExpiredReason: spec.holdFor has passed since the commit that
	// made the hold.
	HoldExpiredReason = "HoldExpired"
	// NewerImageReason: the policy chose an image newer than the one the
	// person rolled back from.
	NewerImageReason = "NewerImage"
	// RolledBackReason: spec.rollback reverted the automation's commit
	// whose health failed within the window; the image it reverted is
	// held (status.holds) until the policy chooses a newer one.
	RolledBackReason = "RolledBack"
	// RollbackWatchingReason: spec.rollback is watching the automation's
	// last commit, within its window.
	RollbackWatchingReason = "RollbackWatching"
	// RollbackPassedReason: the window ended with the commit healthy (or
	// never failing) where it reached.
	RollbackPassedReason = "RollbackPassed"
	// UnhealthyBeforeReason: the health failed at the commit, but it had
	// failed already at the revision before: not blamed on the commit.
	UnhealthyBeforeReason = "UnhealthyBefore"
)
