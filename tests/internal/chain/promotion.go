package chain

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"toolkit.dev/image-toolkit/pkg/git"
)

// KustomizationCRD is a stand-in for Flux's Kustomization CRD: served as
// Flux serves it, with a status subresource, any content kept; tests write
// its status with SetKustomization.
const KustomizationCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: kustomizations.kustomize.toolkit.fluxcd.io
spec:
  group: kustomize.toolkit.fluxcd.io
  scope: Namespaced
  names: {plural: kustomizations, singular: kustomization, kind: Kustomization, listKind: KustomizationList}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

// PromotionObjects formats, with the soak and the fleet's URL: a stand-in
// Kustomization CRD and object for the dev environment (its status
// written by SetKustomization as kustomize-controller writes it; tests/node
// runs the real one), the prod promotion policy podinfo-prod following the
// sample automation "fleet" (which writes clusters/prod, the dev
// environment here), and a prod automation "live" writing clusters/live.
// Apply it after the samples.
const PromotionObjects = KustomizationCRD + `---
apiVersion: image.toolkit.dev/v1beta1
kind: ImagePolicy
metadata:
  name: podinfo-prod
  labels:
    stage: prod
spec:
  imageRepositoryRef:
    name: podinfo
  policy:
    promotion:
      from: {automation: fleet}
      healthOf:
      - {apiVersion: kustomize.toolkit.fluxcd.io/v1, kind: Kustomization, name: apps-dev}
      soak: %s
---
apiVersion: image.toolkit.dev/v1beta1
kind: ImageUpdateAutomation
metadata:
  name: live
spec:
  interval: 5m
  git:
    repository:
      url: %s
      secretRef:
        name: git-credentials
    checkout:
      ref:
        branch: main
    commit:
      author:
        name: promotebot
        email: promotebot@example.com
    push:
      branch: main
  update:
    path: ./clusters/live
  policySelector:
    matchLabels:
      stage: prod
`

// LivePath is prod's manifest, written by the automation "live".
const LivePath = "clusters/live/podinfo.yaml"

// LiveManifest is Manifest for prod (LivePath), its podinfo marker naming
// podinfo-prod.
func LiveManifest(registryHost string) string {
	return strings.ReplaceAll(fmt.Sprintf(Manifest, registryHost), `"default:podinfo"`, `"default:podinfo-prod"`)
}

// Kustomization is the stand-in Kustomization namespace/name, to create
// once KustomizationCRD is served.
func Kustomization(namespace, name string) *unstructured.Unstructured {
	ks := &unstructured.Unstructured{}
	ks.SetAPIVersion("kustomize.toolkit.fluxcd.io/v1")
	ks.SetKind("Kustomization")
	ks.SetNamespace(namespace)
	ks.SetName(name)
	return ks
}

// SetKustomization writes the status of the Kustomization namespace/name
// as kustomize-controller does after an apply: Ready True at
// lastAppliedRevision, or False with HealthCheckFailed at
// lastAttemptedRevision. It returns when the API server has it.
func SetKustomization(ctx context.Context, c client.Client, namespace, name string, ready bool, revision string) error {
	if _, _, ok := git.ParseRevision(revision); !ok {
		return fmt.Errorf("revision %q is not a Flux revision", revision)
	}
	ks := Kustomization(namespace, name)
	if err := c.Get(ctx, client.ObjectKeyFromObject(ks), ks); err != nil {
		return err
	}
	status, reason := "True", "ReconciliationSucceeded"
	if !ready {
		status, reason = "False", "HealthCheckFailed"
	}
	st := map[string]any{
		"observedGeneration":    ks.GetGeneration(),
		"lastAttemptedRevision": revision,
		"conditions": []any{map[string]any{"type": "Ready", "status": status, "reason": reason,
			"message": "revision " + revision, "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}},
	}
	if ready {
		st["lastAppliedRevision"] = revision
	}
	ks.Object["status"] = st
	return c.Status().Update(ctx, ks)
}

// LocalHealthRef is PromotionObjects' healthOf entry, apps-dev in the
// controllers' cluster; PushedHealthRef is the entry to put in its place
// for dev's health pushed to the HealthWebhook "dev" (HealthWebhookObjects).
const (
	LocalHealthRef  = "      - {apiVersion: kustomize.toolkit.fluxcd.io/v1, kind: Kustomization, name: apps-dev}\n"
	PushedHealthRef = "      - {apiVersion: kustomize.toolkit.fluxcd.io/v1, kind: Kustomization, namespace: flux-system, name: apps-dev, webhookRef: {name: dev}}\n"
)

// HealthWebhookObjects are the HealthWebhook "dev" of type flux-hmac and
// its Secret dev-health-token holding key, as docs/policies.md sets them
// up, to apply after PromotionObjects.
func HealthWebhookObjects(key string) string {
	return `---
apiVersion: v1
kind: Secret
metadata: {name: dev-health-token}
stringData: {token: ` + key + `}
---
apiVersion: image.toolkit.dev/v1beta1
kind: HealthWebhook
metadata: {name: dev}
spec:
  type: flux-hmac
  secretRef: {name: dev-health-token}
`
}
