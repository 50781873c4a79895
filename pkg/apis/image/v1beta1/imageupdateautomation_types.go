package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
)

// ImageUpdateAutomationKind is the kind name of ImageUpdateAutomation.
const ImageUpdateAutomationKind = "ImageUpdateAutomation"

// ImageUpdateAutomationSpec says which git repository to keep up to date with
// which image policies.
// +kubebuilder:validation:XValidation:rule="[has(self.sourceRef), has(self.git.repository), has(self.applicationSelector)].filter(x, x).size() == 1",message="exactly one of spec.sourceRef, spec.git.repository and spec.applicationSelector must be set"
// +kubebuilder:validation:XValidation:rule="!has(self.git.repository) || has(self.git.checkout)",message="spec.git.checkout is required with spec.git.repository"
type ImageUpdateAutomationSpec struct {
	// SourceRef names a Flux GitRepository (source.toolkit.fluxcd.io) whose
	// URL, credentials and ref are used, or an Argo CD Application
	// (argoproj.io) whose source's repository, targetRevision (a branch)
	// and path are, with the credentials of Argo CD's repository Secrets.
	// +optional
	SourceRef *CrossNamespaceSourceReference `json:"sourceRef,omitempty"`

	// ApplicationSelector selects Argo CD Applications in the automation's
	// namespace, as argocd-image-updater's ImageUpdater does: each is a
	// source as spec.sourceRef would name it, and one job writes them all.
	// They must share one repository and branch.
	// +optional
	ApplicationSelector *metav1.LabelSelector `json:"applicationSelector,omitempty"`

	// GitSpec says where and how to write.
	// +required
	GitSpec GitSpec `json:"git"`

	// Interval between automation runs.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	// +required
	Interval metav1.Duration `json:"interval"`

	// PolicySelector selects the ImagePolicies in the automation's namespace
	// to apply; all of them when unset.
	// +optional
	PolicySelector *metav1.LabelSelector `json:"policySelector,omitempty"`

	// Update says which files to update, and how.
	// +kubebuilder:default={"strategy":"Setters"}
	// +optional
	Update *UpdateStrategy `json:"update,omitempty"`

	// Schedule limits when the automation makes UpdateJobs to update
	// windows; without it, a job is made whenever something changed.
	// +optional
	Schedule *UpdateSchedule `json:"schedule,omitempty"`

	// Discover makes the automation find the images of the repository
	// itself, and keep an ImageRepository and an ImagePolicy for each,
	// owned by it: no markers needed (docs/discovery.md).
	// +optional
	Discover *DiscoverSpec `json:"discover,omitempty"`

	// HoldFor ends a hold (status.holds) this long after the commit that
	// made it, if nothing ended it before: a newer image than the one
	// rolled back from, or a release (tk-image release, the
	// image.toolkit.dev/release-holds annotation). Without it a hold lasts
	// until one of those.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	// +optional
	HoldFor *metav1.Duration `json:"holdFor,omitempty"`

	// Rollback reverts the automation's own commit when the objects that
	// run it turn unhealthy within a window after it reached them, and
	// holds the images it reverted (status.holds) until a newer one.
	// +optional
	Rollback *RollbackSpec `json:"rollback,omitempty"`

	// Suspend stops the automation.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// RollbackSpec says whose health judges the automation's commits, and for
// how long.
type RollbackSpec struct {
	// HealthOf are the objects that deploy what the automation writes,
	// read as a promotion's healthOf: Flux Kustomizations and
	// HelmReleases, Argo CD Applications, or kstatus objects. A commit is
	// judged by those naming its revision.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=20
	// +listType=atomic
	// +required
	HealthOf []HealthObjectReference `json:"healthOf"`

	// Window is how long after the commit first reached a healthOf object
	// (health seen at its revision) a failure there is blamed on it.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	// +required
	Window metav1.Duration `json:"window"`
}

// RollbackStatus is what spec.rollback watches: the automation's last
// commit on its branch, the health seen at it, and what was done.
type RollbackStatus struct {
	// Commit is the automation's commit being judged (the checkout
	// branch's label@sha1:hash, as status.appliedRevision).
	Commit string `json:"commit"`
	// PushedAt is when the automation pushed it.
	// +optional
	PushedAt *metav1.Time `json:"pushedAt,omitempty"`
	// ReachedAt is when a healthOf object was first seen at it.
	// +optional
	ReachedAt *metav1.Time `json:"reachedAt,omitempty"`
	// Before are the healthOf objects whose health was seen at an
	// earlier revision before the commit reached them, each with that
	// state: health already bad there is not blamed on the commit.
	// +optional
	Before []HealthStatus `json:"before,omitempty"`
	// Health is each healthOf object as last seen.
	// +optional
	Health []HealthStatus `json:"health,omitempty"`
	// Reason is RollbackWatching, RollbackPassed (the window ended
	// healthy), RolledBack (reverted), or UnhealthyBefore (bad already
	// before the commit reached it; not reverted).
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message says why.
	// +optional
	Message string `json:"message,omitempty"`
}

// ReleaseHoldsAnnotation on an ImageUpdateAutomation releases its holds:
// its value is a token (tk-image release writes the time), optionally
// followed by setters or policy names separated by spaces, which limit
// the release to their holds. Each token is handled once
// (status.lastHandledRelease): a hold made later is not released by it.
const ReleaseHoldsAnnotation = "image.toolkit.dev/release-holds"

// DiscoverSpec says which images of the repository an automation
// discovers, and how it follows them. Which images its jobs find and
// update (include, exclude, writeMarkers) is the UpdateJob's own
// DiscoverSpec, inline: the automation hands it to each job as it is.
type DiscoverSpec struct {
	updatev1.DiscoverSpec `json:",inline"`

	// PolicyMode is how far the policies made for discovered images
	// follow the current tag: patch (~1.4.2), minor (the same major; for
	// 0.x the same minor) or major. Never below the current tag. A
	// workload's image.toolkit.dev/policy.<container> annotation wins.
	// +kubebuilder:validation:Enum=patch;minor;major
	// +kubebuilder:default=minor
	// +optional
	PolicyMode string `json:"policyMode,omitempty"`

	// Interval of the ImageRepositories it makes; the automation's
	// interval when unset.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`

	// Registries give the ImageRepositories of images on a host their
	// access: credentials, CA, cloud provider, plain HTTP.
	// +kubebuilder:validation:MaxItems=100
	// +listType=map
	// +listMapKey=host
	// +optional
	Registries []DiscoverRegistry `json:"registries,omitempty"`

	// ServiceAccountName names a ServiceAccount whose imagePullSecrets are
	// the credentials of every ImageRepository it makes (as
	// ImageRepository.spec.serviceAccountName); a registry's secretRef wins.
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
}

// DiscoverRegistry is how the ImageRepositories of images on one registry
// host reach it.
type DiscoverRegistry struct {
	// Host is the registry as image names spell it, e.g. ghcr.io or
	// registry.example.com:5000 (docker.io for Docker Hub).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +required
	Host string `json:"host"`

	// SecretRef is ImageRepository.spec.secretRef.
	// +optional
	SecretRef *meta.LocalObjectReference `json:"secretRef,omitempty"`

	// CertSecretRef is ImageRepository.spec.certSecretRef.
	// +optional
	CertSecretRef *meta.LocalObjectReference `json:"certSecretRef,omitempty"`

	// Provider is ImageRepository.spec.provider.
	// +kubebuilder:validation:Enum=generic;aws;azure;gcp
	// +optional
	Provider string `json:"provider,omitempty"`

	// Insecure is ImageRepository.spec.insecure.
	// +optional
	Insecure bool `json:"insecure,omitempty"`
}

// DiscoveredImage is an image an automation's last job found (the job's
// status.result.discovered entry as it is), with what follows it here:
// Policy is then the ImagePolicy that follows it, one the automation made
// (Owned) or one of the namespace's own for the same image, which it
// defers to; empty when none could be made, and Reason says why.
type DiscoveredImage struct {
	meta.DiscoveredImage `json:",inline"`
	// Owned is set when the automation made the policy.
	// +optional
	Owned bool `json:"owned,omitempty"`
	// Reason says why it is not followed, when it is not.
	// +optional
	Reason string `json:"reason,omitempty"`
}

// DiscoveredByLabel is on the ImageRepositories and ImagePolicies an
// automation made for discovered images; its value is the automation's
// name.
const DiscoveredByLabel = "image.toolkit.dev/discovered-by"

// UpdateSchedule is a set of update windows: the automation makes UpdateJobs
// only while one is open. Changes found outside wait for the next window,
// which the automation wakes up for by itself; a job already running when a
// window closes is left to finish.
type UpdateSchedule struct {
	// TimeZone the cron expressions are read in: an IANA name such as
	// Europe/Berlin. UTC when empty.
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="self != 'Local'",message="timeZone Local depends on the controller's machine: use an IANA name such as Europe/Berlin, or UTC"
	// +optional
	TimeZone string `json:"timeZone,omitempty"`

	// Windows open at the times their cron expression names and stay
	// open for their duration. At least one.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=20
	// +listType=atomic
	// +required
	Windows []UpdateWindow `json:"windows"`
}

// UpdateWindow is one recurring update window.
type UpdateWindow struct {
	// Cron says when the window opens, as a Kubernetes CronJob's schedule:
	// five fields (minute hour day-of-month month day-of-week) or
	// @yearly, @monthly, @weekly, @daily, @hourly. Read in the schedule's
	// time zone, which the expression cannot override.
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|[^\s@=]+(\s+[^\s@=]+){4})$`
	// +required
	Cron string `json:"cron"`

	// Duration the window stays open, in elapsed time.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern="^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="a window must stay open at least 1s"
	// +required
	Duration metav1.Duration `json:"duration"`
}

// CrossNamespaceSourceReference names a source object, possibly in another
// namespace.
type CrossNamespaceSourceReference struct {
	// APIVersion of the referent, e.g. source.toolkit.fluxcd.io/v1 or
	// argoproj.io/v1alpha1.
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`

	// Kind of the referent.
	// +kubebuilder:validation:Enum=GitRepository;Application
	// +kubebuilder:default=GitRepository
	// +optional
	Kind string `json:"kind,omitempty"`

	// Name of the referent.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`

	// Namespace of the referent; the automation's namespace when empty.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// GitSpec says where and how to write to git.
type GitSpec struct {
	// Repository makes the automation standalone: no Flux GitRepository
	// needed. Exactly one of this and spec.sourceRef.
	// +optional
	Repository *updatev1.GitRepositorySpec `json:"repository,omitempty"`

	// Checkout overrides the source's ref.
	// +optional
	Checkout *updatev1.GitCheckoutSpec `json:"checkout,omitempty"`

	// Commit says how to write the commit.
	// +required
	Commit updatev1.CommitSpec `json:"commit"`

	// Push says where to push; defaults to the checkout branch.
	// +optional
	Push *updatev1.PushSpec `json:"push,omitempty"`
}

// UpdateStrategyName names an update strategy.
// +kubebuilder:validation:Enum=Setters;ArgoCD
type UpdateStrategyName string

const (
	// UpdateStrategySetters updates the values marked with $imagepolicy
	// comments (and, with spec.discover, the discovered images).
	UpdateStrategySetters UpdateStrategyName = "Setters"
	// UpdateStrategyArgoCD writes the images the Application of
	// spec.sourceRef runs into Argo CD's parameter override file,
	// .argocd-source-<app>.yaml beside each source's path, as
	// argocd-image-updater's git write-back does; markers in the path are
	// set as with Setters.
	UpdateStrategyArgoCD UpdateStrategyName = "ArgoCD"
)

// UpdateStrategy says which files to update, and how.
type UpdateStrategy struct {
	// Strategy of the update.
	// +kubebuilder:default=Setters
	// +required
	Strategy UpdateStrategyName `json:"strategy"`

	// Path within the repository; the root when empty.
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.split('/').exists(s, s == '..')",message="path must be relative and stay inside the repository"
	// +optional
	Path string `json:"path,omitempty"`

	// ArgoCD says, for strategy ArgoCD, how the override file names each
	// policy's image.
	// +optional
	ArgoCD *ArgoCDUpdate `json:"argoCD,omitempty"`

	// Charts follow the chart versions of Argo CD Applications that render
	// a chart from a chart repository: the targetRevision of each chart
	// source of the Application's manifest under the update path is set
	// to the policy's latest tag (the chart version), found by the
	// Application's name, without a marker. With any strategy.
	// +kubebuilder:validation:MaxItems=100
	// +listType=atomic
	// +optional
	Charts []ChartUpdate `json:"charts,omitempty"`

	// Files are values set in files that cannot carry a marker (JSON:
	// an ECS task definition's image, a devcontainer.json's), by a JSON
	// Pointer and the policy a marker would name. With any strategy.
	// +kubebuilder:validation:MaxItems=100
	// +listType=atomic
	// +optional
	Files []meta.FileUpdate `json:"files,omitempty"`
}

// ChartUpdate follows one Application's chart version through an
// ImagePolicy over the chart's repository (an OCI repository, or an
// HTTP(S) Helm repository's REPOSITORY/CHART).
type ChartUpdate struct {
	meta.ArgoCDChart `json:",inline"`

	// Policy is the ImagePolicy, in the automation's namespace and
	// selected by spec.policySelector, whose latest tag is the version.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Policy string `json:"policy"`
}

// ArgoCDUpdate is how strategy ArgoCD writes the override file. A selected
// policy is written for an Application when the Application runs its
// image (status.summary.images), or always when listed with force.
type ArgoCDUpdate struct {
	// Images name the override entries of policies; a policy not listed
	// gets the defaults (the image's own name for Kustomize,
	// image.repository and image.tag for Helm).
	// +kubebuilder:validation:MaxItems=100
	// +listType=map
	// +listMapKey=policy
	// +optional
	Images []ArgoCDImage `json:"images,omitempty"`

	// HelmValuesObject writes the images of Helm sources into the override
	// file's helm.valuesObject (nested maps, as the Helm names spell them)
	// instead of helm.parameters, for every policy.
	// +optional
	HelmValuesObject bool `json:"helmValuesObject,omitempty"`
}

// ArgoCDImage is where the override file holds one policy's image, as
// argocd-image-updater's <alias>.kustomize.image-name and
// <alias>.helm.image-name, image-tag and image-spec say.
type ArgoCDImage struct {
	// Policy is the ImagePolicy's name, in the automation's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Policy string `json:"policy"`

	// Where the override file holds the image.
	meta.ArgoCDImageFields `json:",inline"`

	// Force writes the image for every Application of the automation,
	// whether or not Argo CD reports it running the image (as
	// argocd-image-updater's force-update).
	// +optional
	Force bool `json:"force,omitempty"`
}

// ImageUpdateAutomationStatus is the observed state of an ImageUpdateAutomation.
type ImageUpdateAutomationStatus struct {
	// LastAutomationRunTime is when the automation last ran.
	// +optional
	LastAutomationRunTime *metav1.Time `json:"lastAutomationRunTime,omitempty"`

	// LastPushCommit is the last commit pushed.
	// +optional
	LastPushCommit string `json:"lastPushCommit,omitempty"`

	// LastPushTime is when the last commit was pushed.
	// +optional
	LastPushTime *metav1.Time `json:"lastPushTime,omitempty"`

	// History are the automation's last pushes (or proposals), newest
	// first, each with the images it changed: what it committed over time,
	// at most 20.
	// +kubebuilder:validation:MaxItems=20
	// +optional
	History []PushRecord `json:"history,omitempty"`

	// ObservedPolicies are the policies and their images the last run
	// applied, by policy name.
	// +optional
	ObservedPolicies ObservedPolicies `json:"observedPolicies,omitempty"`

	// AppliedRevision is the commit of the checkout branch whose files
	// hold observedPolicies' images, as <branch>@sha1:<hash>: the commit
	// the last job pushed there, or the head it found up to date. Empty
	// while the images are only proposed (a pull request, another push
	// branch). Promotion policies follow it.
	// +optional
	AppliedRevision string `json:"appliedRevision,omitempty"`

	// ObservedSourceRevision is the checkout branch head the last run saw, as
	// <branch>@sha1:<hash>.
	// +optional
	ObservedSourceRevision string `json:"observedSourceRevision,omitempty"`

	// LastJob is the last finished UpdateJob whose outcome this status
	// records.
	// +optional
	LastJob *UpdateJobReference `json:"lastJob,omitempty"`

	// Targets are, when the automation's Argo CD Applications are written
	// on more than one repository or branch, each of those: one UpdateJob
	// and one commit per target, each with its own outcome. The fields
	// above then tell the newest of them; the Ready condition names the
	// targets that failed.
	// +kubebuilder:validation:MaxItems=100
	// +optional
	Targets []TargetStatus `json:"targets,omitempty"`

	// NextWindow is, with spec.schedule, the update window that was open
	// when the automation last ran, or else the next one to open.
	// +optional
	NextWindow *UpdateWindowStatus `json:"nextWindow,omitempty"`

	// Discovered are the images spec.discover found in the repository, by
	// name, as the last UpdateJob reported them; at most 500.
	// +kubebuilder:validation:MaxItems=500
	// +optional
	Discovered []DiscoveredImage `json:"discovered,omitempty"`

	// Holds are the marked values a person set over the automation's (a
	// hand rollback or pin), which it leaves as they are until the hold
	// ends; at most 100.
	// +kubebuilder:validation:MaxItems=100
	// +optional
	Holds []AutomationHold `json:"holds,omitempty"`

	// Rollback is what spec.rollback watches, and what it did.
	// +optional
	Rollback *RollbackStatus `json:"rollback,omitempty"`

	// LastHandledRelease is the last token of the release-holds
	// annotation the automation handled.
	// +optional
	LastHandledRelease string `json:"lastHandledRelease,omitempty"`

	// LastPullRequest is the pull request the last job that proposed,
	// updated or closed one left (spec.git.push.pullRequest).
	// +optional
	LastPullRequest *meta.PullRequestStatus `json:"lastPullRequest,omitempty"`

	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the last generation reconciled.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	meta.ReconcileRequestStatus `json:",inline"`
}

// TargetStatus is one repository and branch an automation writes, with
// what its last run and job there did.
type TargetStatus struct {
	// URL is the repository.
	URL string `json:"url"`
	// Branch is the branch checked out and pushed to.
	Branch string `json:"branch"`
	// Applications are the Argo CD Applications written there (with their
	// sources, for multi-source Applications); at most 20.
	// +kubebuilder:validation:MaxItems=20
	// +optional
	Applications []string `json:"applications,omitempty"`
	// LastAutomationRunTime is when a run last made a job (or found
	// nothing to do) for the target.
	// +optional
	LastAutomationRunTime *metav1.Time `json:"lastAutomationRunTime,omitempty"`
	// LastPushCommit is the last commit pushed to the target.
	// +optional
	LastPushCommit string `json:"lastPushCommit,omitempty"`
	// LastPushTime is when it was pushed.
	// +optional
	LastPushTime *metav1.Time `json:"lastPushTime,omitempty"`
	// ObservedPolicies are the policies and images its last job applied.
	// +optional
	ObservedPolicies ObservedPolicies `json:"observedPolicies,omitempty"`
	// ObservedSourceRevision is the branch head its last run saw.
	// +optional
	ObservedSourceRevision string `json:"observedSourceRevision,omitempty"`
	// AppliedRevision is the commit whose files hold observedPolicies'
	// images.
	// +optional
	AppliedRevision string `json:"appliedRevision,omitempty"`
	// ObservedGeneration is the automation's generation its last job
	// applied.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// LastJob is its last finished UpdateJob.
	// +optional
	LastJob *UpdateJobReference `json:"lastJob,omitempty"`
	// Ready is the target's own Ready condition.
	// +optional
	Ready *metav1.Condition `json:"ready,omitempty"`
}

// MaxTargets bounds status.targets; MaxTargetApplications bounds each
// target's applications.
const (
	MaxTargets            = 100
	MaxTargetApplications = 20
)

// AutomationHold is a hold as the last job reported it, with what ends it.
type AutomationHold struct {
	updatev1.Hold `json:",inline"`
	// Policy is the name of the ImagePolicy the marker names.
	// +optional
	Policy string `json:"policy,omitempty"`
	// Target is, for an automation that writes several repositories or
	// branches (status.targets), the repository and branch of the file,
	// as REPOSITORY@BRANCH; empty with one.
	// +optional
	Target string `json:"target,omitempty"`
	// Ends is when spec.holdFor ends it.
	// +optional
	Ends *metav1.Time `json:"ends,omitempty"`
	// Reason is HeldByPerson (a person's value) or RolledBack (a
	// rollback's: the policy's image is written as Value everywhere) while
	// the hold lasts, or why it ended (HoldReleased, HoldExpired,
	// NewerImage): the next job then sets the value the policy chooses.
	// A rollback's hold has no path: it holds the policy, not a file.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message says why it is held or why it ended.
	// +optional
	Message string `json:"message,omitempty"`
}

// UpdateWindowStatus is one opening of an automation's update windows:
// overlapping and back-to-back windows count as one.
type UpdateWindowStatus struct {
	// Start is when it opens (or opened).
	// +required
	Start metav1.Time `json:"start"`
	// End is when it closes.
	// +required
	End metav1.Time `json:"end"`
}

// MaxHistory bounds status.history.
const MaxHistory = 20

// MaxPushedImages bounds the images a PushRecord lists.
const MaxPushedImages = 20

// PushRecord is one commit an automation pushed or proposed.
type PushRecord struct {
	// Commit is the pushed commit.
	Commit string `json:"commit"`
	// Time is when the job that pushed it finished.
	Time metav1.Time `json:"time"`
	// PullRequest is the number of the pull request that proposed the
	// commit, when it was proposed rather than pushed.
	// +optional
	PullRequest int `json:"pullRequest,omitempty"`
	// Merged is, for a pull request, the first commit of the checkout
	// branch found carrying every image the request proposed: the merge
	// or squash commit of a person's merge. It is what spec.rollback
	// judges in PR mode, as Commit in push mode.
	// +optional
	Merged string `json:"merged,omitempty"`
	// Images are the policies whose values the commit changed, with the
	// image each wrote, in policy order; at most 20.
	// +kubebuilder:validation:MaxItems=20
	// +optional
	Images []PushedImage `json:"images,omitempty"`
	// MoreImages counts the changed policies beyond Images.
	// +optional
	MoreImages int `json:"moreImages,omitempty"`
}

// PushedImage is what a commit wrote for one policy.
type PushedImage struct {
	// Policy is the ImagePolicy's name.
	Policy string `json:"policy"`
	// Image is the image the policy selected and the commit wrote.
	meta.ImageRef `json:",inline"`
	// From is the tag the automation had applied before, when it had.
	// +optional
	From string `json:"from,omitempty"`
	// FromDigest is the digest of From, when it had one: what a rollback
	// writes back.
	// +optional
	FromDigest string `json:"fromDigest,omitempty"`
}

// ObservedPolicies maps policy names to the image each selected.
type ObservedPolicies map[string]meta.ImageRef

// UpdateJobReference names an UpdateJob an automation created, in the
// automation's namespace.
type UpdateJobReference struct {
	// Name of the UpdateJob.
	// +required
	Name string `json:"name"`
	// UID of the UpdateJob, telling it apart from an earlier job of the
	// same name.
	// +required
	UID types.UID `json:"uid"`
	// Phase the job finished in.
	// +optional
	Phase updatev1.UpdateJobPhase `json:"phase,omitempty"`
	// UnmarkedPolicies are the policies the job applied that no marker
	// names (the job's status.result.unmarkedPolicies, at most 20), kept
	// here because the job may be deleted.
	// +optional
	UnmarkedPolicies []string `json:"unmarkedPolicies,omitempty"`
	// UnknownPolicies are policies markers name that the job had no value
	// for: no such ImagePolicy, one the policySelector does not select, or
	// one without a latest image yet (from the job's status.result.markers,
	// at most 20).
	// +optional
	UnknownPolicies []string `json:"unknownPolicies,omitempty"`
}

// MaxLastJobPolicies is how many policies each list of lastJob holds.
const MaxLastJobPolicies = 20

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=iua,categories=image-toolkit
// +kubebuilder:printcolumn:name="Last run",type=date,JSONPath=`.status.lastAutomationRunTime`
// +kubebuilder:printcolumn:name="Last push",type=string,JSONPath=`.status.lastPushCommit`,priority=1
// +kubebuilder:printcolumn:name="Pull request",type=string,JSONPath=`.status.lastPullRequest.url`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// ImageUpdateAutomation keeps image references in a git repository up to date
// with ImagePolicies, by creating UpdateJobs.
type ImageUpdateAutomation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ImageUpdateAutomationSpec `json:"spec"`
	// +optional
	Status ImageUpdateAutomationStatus `json:"status,omitempty"`
}

// GetConditions returns the status conditions.
func (in *ImageUpdateAutomation) GetConditions() []metav1.Condition {
	return in.Status.Conditions
}

// SetConditions sets the status conditions.
func (in *ImageUpdateAutomation) SetConditions(c []metav1.Condition) {
	in.Status.Conditions = c
}

// +kubebuilder:object:root=true

// ImageUpdateAutomationList is a list of ImageUpdateAutomations.
type ImageUpdateAutomationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ImageUpdateAutomation `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ImageUpdateAutomation{}, &ImageUpdateAutomationList{})
}
