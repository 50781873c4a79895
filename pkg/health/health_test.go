package health

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

const (
	sha  = "8f3c9a1b2d4e5f60718293a4b5c6d7e8f9a0b1c2"
	prev = "1111111111111111111111111111111111111111"
)

func object(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	// As a client reads it: JSON numbers become int64.
	js, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(js); err != nil {
		t.Fatal(err)
	}
	return u
}

// The statuses below are written as each controller writes them: Flux's
// kustomize-controller and helm-controller (conditions Ready, Reconciling,
// Stalled with their reasons; lastAppliedRevision and
// lastAttemptedRevision) and Argo CD's application controller
// (status.sync, status.health, status.operationState).
func TestOfReadsEachKindAsItsControllerWritesIt(t *testing.T) {
	at := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		doc  string
		want Health
	}{
		{
			name: "a Kustomization that applied the commit and passed its health checks",
			doc: `apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: apps-dev, namespace: flux-system, generation: 3}
status:
  observedGeneration: 3
  lastAppliedRevision: main@sha1:` + sha + `
  lastAttemptedRevision: main@sha1:` + sha + `
  conditions:
  - {type: Ready, status: "True", reason: ReconciliationSucceeded, message: "Applied revision: main@sha1:` + sha + `", lastTransitionTime: "2026-11-20T10:00:00Z", observedGeneration: 3}
  - {type: Healthy, status: "True", reason: Succeeded, message: Health check passed, lastTransitionTime: "2026-11-20T10:00:00Z"}`,
			want: Health{State: Healthy, Revision: "main@sha1:" + sha, Since: at, Reason: "ReconciliationSucceeded", Message: "Applied revision: main@sha1:" + sha},
		},
		{
			name: "a Kustomization whose health check failed blames the attempted revision, not the applied one",
			doc: `apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: apps-dev, namespace: flux-system, generation: 3}
status:
  observedGeneration: 3
  lastAppliedRevision: main@sha1:` + prev + `
  lastAttemptedRevision: main@sha1:` + sha + `
  conditions:
  - {type: Ready, status: "False", reason: HealthCheckFailed, message: "health check failed after 1m0s: timeout waiting for: [Deployment/apps/podinfo status: 'InProgress']", lastTransitionTime: "2026-11-20T10:00:00Z", observedGeneration: 3}`,
			want: Health{State: Degraded, Revision: "main@sha1:" + sha, Since: at, Reason: "HealthCheckFailed",
				Message: "health check failed after 1m0s: timeout waiting for: [Deployment/apps/podinfo status: 'InProgress']"},
		},
		{
			name: "a Kustomization whose health check failed and that will retry is degraded at the attempted revision",
			// As kustomize-controller v1.9.1 wrote it in tests/node: it keeps
			// Reconciling True, reason ProgressingWithRetry, after the failure.
			doc: `apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: apps-dev, namespace: flux-system, generation: 1}
status:
  observedGeneration: 1
  lastAppliedRevision: main@sha1:` + prev + `
  lastAttemptedRevision: main@sha1:` + sha + `
  conditions:
  - {type: Reconciling, status: "True", reason: ProgressingWithRetry, message: "Running health checks for revision main@sha1:` + sha + ` with a timeout of 30s", lastTransitionTime: "2026-11-20T10:00:00Z", observedGeneration: 1}
  - {type: Ready, status: "False", reason: HealthCheckFailed, message: "health check failed after 30.024981109s: timeout waiting for: [Deployment/apps-dev/app status: 'InProgress']", lastTransitionTime: "2026-11-20T10:00:00Z", observedGeneration: 1}
  - {type: Healthy, status: "False", reason: HealthCheckFailed, message: "timeout waiting for: [Deployment/apps-dev/app status: 'InProgress']", lastTransitionTime: "2026-11-20T10:00:00Z", observedGeneration: 1}`,
			want: Health{State: Degraded, Revision: "main@sha1:" + sha, Since: at, Reason: "HealthCheckFailed",
				Message: "health check failed after 30.024981109s: timeout waiting for: [Deployment/apps-dev/app status: 'InProgress']"},
		},
		{
			name: "a Kustomization reconciling a new revision is progressing",
			doc: `apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: apps-dev, generation: 3}
status:
  observedGeneration: 3
  lastAppliedRevision: main@sha1:` + prev + `
  lastAttemptedRevision: main@sha1:` + sha + `
  conditions:
  - {type: Reconciling, status: "True", reason: Progressing, message: "Reconciliation in progress", lastTransitionTime: "2026-11-20T10:00:00Z"}
  - {type: Ready, status: "Unknown", reason: Progressing, message: "Reconciliation in progress", lastTransitionTime: "2026-11-20T10:00:00Z"}`,
			want: Health{State: Progressing, Revision: "main@sha1:" + sha, Since: at, Reason: "Progressing", Message: "Reconciliation in progress"},
		},
		{
			name: "a Kustomization waiting on its dependency blames no revision",
			doc: `apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: apps-prod, generation: 1}
status:
  observedGeneration: 1
  lastAttemptedRevision: main@sha1:` + sha + `
  conditions:
  - {type: Ready, status: "False", reason: DependencyNotReady, message: "dependency 'flux-system/infra' is not ready", lastTransitionTime: "2026-11-20T10:00:00Z"}`,
			want: Health{State: Progressing, Revision: "main@sha1:" + sha, Since: at, Reason: "DependencyNotReady", Message: "dependency 'flux-system/infra' is not ready"},
		},
		{
			name: "a Ready condition from before the latest spec is stale",
			doc: `apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: apps-dev, generation: 4}
status:
  observedGeneration: 3
  lastAppliedRevision: main@sha1:` + prev + `
  lastAttemptedRevision: main@sha1:` + prev + `
  conditions:
  - {type: Ready, status: "True", reason: ReconciliationSucceeded, message: ok, lastTransitionTime: "2026-11-20T10:00:00Z"}`,
			want: Health{State: Progressing, Revision: "main@sha1:" + prev, Reason: "ObservedGeneration", Message: "the controller has not yet observed the latest spec"},
		},
		{
			name: "a Stalled Kustomization is degraded",
			doc: `apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: apps-dev, generation: 1}
status:
  observedGeneration: 1
  lastAttemptedRevision: main@sha1:` + sha + `
  conditions:
  - {type: Stalled, status: "True", reason: BuildFailed, message: "kustomize build failed", lastTransitionTime: "2026-11-20T10:00:00Z"}
  - {type: Ready, status: "False", reason: BuildFailed, message: "kustomize build failed", lastTransitionTime: "2026-11-20T10:00:00Z"}`,
			want: Health{State: Degraded, Revision: "main@sha1:" + sha, Since: at, Reason: "BuildFailed", Message: "kustomize build failed"},
		},
		{
			name: "a HelmRelease installed and tested is healthy at its chart version",
			doc: `apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: {name: podinfo, namespace: apps, generation: 2}
status:
  observedGeneration: 2
  lastAttemptedRevision: 6.5.0
  conditions:
  - {type: Ready, status: "True", reason: UpgradeSucceeded, message: "Helm upgrade succeeded for release apps/podinfo.v2 with chart podinfo@6.5.0", lastTransitionTime: "2026-11-20T10:00:00Z", observedGeneration: 2}
  - {type: Released, status: "True", reason: UpgradeSucceeded, message: ok, lastTransitionTime: "2026-11-20T10:00:00Z"}`,
			want: Health{State: Healthy, Revision: "6.5.0", Since: at, Reason: "UpgradeSucceeded", Message: "Helm upgrade succeeded for release apps/podinfo.v2 with chart podinfo@6.5.0"},
		},
		{
			name: "a HelmRelease whose upgrade failed is degraded",
			doc: `apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: {name: podinfo, namespace: apps, generation: 2}
status:
  observedGeneration: 2
  lastAttemptedRevision: 6.5.1
  conditions:
  - {type: Ready, status: "False", reason: UpgradeFailed, message: "Helm upgrade failed: context deadline exceeded", lastTransitionTime: "2026-11-20T10:00:00Z", observedGeneration: 2}`,
			want: Health{State: Degraded, Revision: "6.5.1", Since: at, Reason: "UpgradeFailed", Message: "Helm upgrade failed: context deadline exceeded"},
		},
		{
			name: "an Application synced to the commit and healthy",
			doc: `apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: podinfo-dev, namespace: argocd}
status:
  sync: {status: Synced, revision: ` + sha + `}
  health: {status: Healthy, lastTransitionTime: "2026-11-20T10:00:00Z"}
  operationState: {phase: Succeeded, syncResult: {revision: ` + sha + `}}`,
			want: Health{State: Healthy, Revision: sha, Since: at, Reason: "Healthy"},
		},
		{
			name: "an Application healthy but out of sync is not yet at the revision",
			doc: `apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: podinfo-dev, namespace: argocd}
status:
  sync: {status: OutOfSync, revision: ` + sha + `}
  health: {status: Healthy, lastTransitionTime: "2026-11-20T10:00:00Z"}`,
			want: Health{State: Progressing, Revision: sha, Since: at, Reason: "OutOfSync"},
		},
		{
			name: "an Application whose sync to the revision failed",
			doc: `apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: podinfo-dev, namespace: argocd}
status:
  sync: {status: OutOfSync, revision: ` + sha + `}
  health: {status: Healthy, lastTransitionTime: "2026-11-20T10:00:00Z"}
  operationState: {phase: Failed, message: "one or more objects failed to apply", syncResult: {revision: ` + sha + `}}`,
			want: Health{State: Degraded, Revision: sha, Since: at, Reason: "SyncFailed", Message: "one or more objects failed to apply"},
		},
		{
			name: "an Application whose pods crash is degraded",
			doc: `apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: podinfo-dev, namespace: argocd}
status:
  sync: {status: Synced, revision: ` + sha + `}
  health: {status: Degraded, lastTransitionTime: "2026-11-20T10:00:00Z"}`,
			want: Health{State: Degraded, Revision: sha, Since: at, Reason: "Degraded"},
		},
		{
			name: "a multi-source Application names each source's revision",
			doc: `apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: podinfo-dev, namespace: argocd}
status:
  sync: {status: Synced, revisions: [` + sha + `, 6.5.0]}
  health: {status: Healthy}`,
			want: Health{State: Healthy, Revision: sha + ",6.5.0", Reason: "Healthy"},
		},
		{
			name: "any other kind is read by its conditions, with no revision",
			doc: `apiVersion: example.com/v1
kind: Database
metadata: {name: db, generation: 5}
status:
  observedGeneration: 5
  conditions:
  - {type: Ready, status: "True", reason: Available, message: ok, lastTransitionTime: "2026-11-20T10:00:00Z"}`,
			want: Health{State: Healthy, Since: at, Reason: "Available", Message: "ok"},
		},
		{
			name: "an object without a status says nothing",
			doc: `apiVersion: example.com/v1
kind: Database
metadata: {name: db, generation: 1}`,
			want: Health{State: Unknown, Reason: "NoReadyCondition", Message: "the status has no Ready condition"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Of(object(t, tt.doc))
			if got != tt.want {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// A commit is named the same whichever way the object writes it.
func TestCommitOfEachRevisionForm(t *testing.T) {
	for rev, want := range map[string]string{
		"main@sha1:" + sha: sha,
		sha:                sha,
		"6.5.0":            "",
		sha + ",6.5.0":     "",
		"":                 "",
		"main@sha1:":       "",
	} {
		if got := (Health{Revision: rev}).Commit(); got != want {
			t.Errorf("Commit of %q = %q, want %q", rev, got, want)
		}
	}
}
