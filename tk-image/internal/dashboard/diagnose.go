package dashboard

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

// Diagnosis is what a page says of an object that fails or waits: the
// reason in words, since when, the object at fault and the next step. The
// condition's own reason and message stay beside it, so nothing the
// controller said is hidden behind the summary.
type Diagnosis struct {
	Reason, Message string
	// Words is the reason as a sentence a person reads first.
	Words string
	// Since is when the condition last changed.
	Since *metav1.Time
	// Culprit is the object at fault, when one is known.
	Culprit *ObjectLink
	// Fix is the next step.
	Fix string
	// Now is when the page was drawn, for how long ago Since was.
	Now time.Time
}

// ObjectLink names an object, with its dashboard page when it has one and
// otherwise the command that shows it.
type ObjectLink struct {
	Kind, Namespace, Name string
	// URL is its page here; Command what shows it when it has none.
	URL, Command string
}

func pageOf(kind, namespace, name string) *ObjectLink {
	l := &ObjectLink{Kind: kind, Namespace: namespace, Name: name}
	seg := map[string]string{imagev1.ImageUpdateAutomationKind: "automations", imagev1.ImagePolicyKind: "policies",
		imagev1.ImageRepositoryKind: "images", updatev1.UpdateJobKind: "jobs"}[kind]
	if seg != "" {
		l.URL = "/" + seg + "/" + url.PathEscape(namespace) + "/" + url.PathEscape(name)
	} else if kind == "Secret" {
		// describe lists a Secret's keys and their sizes, not the values.
		l.Command = fmt.Sprintf("kubectl -n %s describe secret %s", namespace, name)
	} else {
		l.Command = fmt.Sprintf("kubectl -n %s get %s %s -o yaml", namespace, strings.ToLower(kind), name)
	}
	return l
}

// subject is the object a diagnosis is of, with what the fixes read.
type subject struct {
	kind       string
	automation *imagev1.ImageUpdateAutomation
	policy     *imagev1.ImagePolicy
	repository *imagev1.ImageRepository
}

// fix is one reason's entry: its words, and the culprit and next step it
// finds in the subject.
type fix struct {
	words string
	find  func(s subject) (*ObjectLink, string)
}

// fixes are the reasons a page explains, by condition reason: one entry a
// reason, so a new failure kind is one line here and its test.
var fixes = map[string]fix{
	conditions.AuthenticationFailedReason: {"the server refused the credentials", credentialsFix("are refused")},
	conditions.SecretNotFoundReason:       {"a Secret it names does not exist", credentialsFix("do not exist")},
	imagev1.InvalidSecretReason:           {"a Secret it names lacks a key it needs", credentialsFix("lack a key")},
	conditions.AccessDeniedReason:         {"a reference is refused", refusedRefFix},
	conditions.GitOperationFailedReason: {"a git operation failed", func(s subject) (*ObjectLink, string) {
		return nil, "read the message for the git server's answer: check the repository URL and that the git server is reachable from the controller"
	}},
	conditions.DependencyNotReadyReason: {"it waits for an object it needs", dependencyFix},
	imagev1.SourceNotFoundReason:        {"the source it names does not exist", sourceFix},
	imagev1.InvalidPolicySelectorReason: {"spec.policySelector is invalid", func(subject) (*ObjectLink, string) {
		return nil, "correct spec.policySelector: the message names the bad part"
	}},
	imagev1.InvalidScheduleReason: {"spec.schedule is invalid", func(subject) (*ObjectLink, string) {
		return nil, "correct spec.schedule: the message names the bad part"
	}},
	imagev1.ScanFailedReason: {"the registry scan failed", func(s subject) (*ObjectLink, string) {
		return nil, "read the registry's answer in the message: check spec.image and that the registry is reachable from the reflector"
	}},
	imagev1.ImageURLInvalidReason: {"spec.image is not an image name", func(subject) (*ObjectLink, string) {
		return nil, "correct spec.image, e.g. ghcr.io/org/app (no tag, no scheme)"
	}},
	imagev1.NoMatchingTagReason: {"no tag passes the policy", func(s subject) (*ObjectLink, string) {
		if p := s.policy; p != nil {
			return pageOf(imagev1.ImageRepositoryKind, orText(p.Spec.ImageRepositoryRef.Namespace, p.Namespace), p.Spec.ImageRepositoryRef.Name),
				"compare the repository's tags with the policy's rules below: the filter, the range or the pattern drops every tag"
		}
		return nil, ""
	}},
	imagev1.InvalidPolicyReason: {"the policy's rules are invalid", func(subject) (*ObjectLink, string) {
		return nil, "correct spec.policy or spec.filterTags: the message names the bad part"
	}},
	imagev1.SignatureVerificationFailedReason: {"no candidate's signature verified", func(subject) (*ObjectLink, string) {
		return nil, "check that the images are signed by the key or identity spec.verify names"
	}},
	updatev1.PullRequestFailedReason: {"the forge refused the pull request", func(s subject) (*ObjectLink, string) {
		return nil, "check the forge token's rights to open pull requests (spec.git.push.pullRequest.secretRef, else the repository's Secret)"
	}},
	updatev1.RateLimitedReason: {"the server limits the rate of requests", func(subject) (*ObjectLink, string) {
		return nil, "nothing to do: it retries when the limit resets"
	}},
}

// diagnose reads an object's failing or waiting Ready condition; nil when
// it is Ready or has none.
func diagnose(c *metav1.Condition, s subject, now time.Time) *Diagnosis {
	if c == nil || c.Status == metav1.ConditionTrue {
		return nil
	}
	d := &Diagnosis{Reason: c.Reason, Message: c.Message, Since: &c.LastTransitionTime, Now: now}
	if f, ok := fixes[c.Reason]; ok {
		d.Words = f.words
		d.Culprit, d.Fix = f.find(s)
	}
	if d.Since.IsZero() {
		d.Since = nil
	}
	return d
}

// credentialsFix names the Secret the subject's kind authenticates with:
// the automation's git Secret (or its GitRepository's), the repository's
// registry Secret or ServiceAccount, and says which keys to check.
func credentialsFix(what string) func(s subject) (*ObjectLink, string) {
	return func(s subject) (*ObjectLink, string) {
		switch {
		case s.automation != nil:
			a := s.automation
			if r := a.Spec.GitSpec.Repository; r != nil {
				if r.SecretRef == nil {
					return nil, "the repository needs credentials: set spec.git.repository.secretRef to a Secret with username and password (HTTPS) or identity and known_hosts (SSH)"
				}
				return pageOf("Secret", a.Namespace, r.SecretRef.Name), fmt.Sprintf("check the %s of Secret %s/%s: the git server says they %s",
					gitKeys(r.URL), a.Namespace, r.SecretRef.Name, what)
			}
			if src := a.Spec.SourceRef; src != nil {
				return pageOf(orText(src.Kind, "GitRepository"), orText(src.Namespace, a.Namespace), src.Name),
					fmt.Sprintf("check the Secret that %s %s/%s names in spec.secretRef: the git server says its credentials %s",
						orText(src.Kind, "GitRepository"), orText(src.Namespace, a.Namespace), src.Name, what)
			}
		case s.repository != nil:
			r := s.repository
			if r.Spec.SecretRef != nil {
				return pageOf("Secret", r.Namespace, r.Spec.SecretRef.Name), fmt.Sprintf("check the .dockerconfigjson (or username and password) of Secret %s/%s: the registry says they %s",
					r.Namespace, r.Spec.SecretRef.Name, what)
			}
			if r.Spec.ServiceAccountName != "" {
				return pageOf("ServiceAccount", r.Namespace, r.Spec.ServiceAccountName), fmt.Sprintf("check the imagePullSecrets of ServiceAccount %s/%s: the registry says they %s",
					r.Namespace, r.Spec.ServiceAccountName, what)
			}
			return nil, "the registry wants credentials: set spec.secretRef to a docker-registry Secret (kubectl create secret docker-registry)"
		case s.policy != nil:
			if v := s.policy.Spec.Verify; v != nil && v.SecretRef != nil {
				return pageOf("Secret", s.policy.Namespace, v.SecretRef.Name), fmt.Sprintf("check Secret %s/%s, which spec.verify.secretRef names: its keys %s",
					s.policy.Namespace, v.SecretRef.Name, what)
			}
		}
		return nil, ""
	}
}

// gitKeys are the keys of a git Secret that authenticate to url.
func gitKeys(u string) string {
	if strings.HasPrefix(u, "ssh://") || (!strings.Contains(u, "://") && strings.Contains(u, "@")) {
		return "identity and known_hosts keys"
	}
	return "username and password (or bearerToken) keys"
}

func refusedRefFix(s subject) (*ObjectLink, string) {
	return nil, "the message names the reference refused: a cross-namespace reference needs the controller's flag, or the namespace's access labels"
}

// dependencyFix names what the subject waits for: a policy's
// ImageRepository (missing, or not scanned yet), an automation's policies.
func dependencyFix(s subject) (*ObjectLink, string) {
	switch {
	case s.policy != nil:
		p := s.policy
		ns := orText(p.Spec.ImageRepositoryRef.Namespace, p.Namespace)
		return pageOf(imagev1.ImageRepositoryKind, ns, p.Spec.ImageRepositoryRef.Name),
			fmt.Sprintf("ImageRepository %s/%s must exist and scan first: create it, or correct spec.imageRepositoryRef", ns, p.Spec.ImageRepositoryRef.Name)
	case s.automation != nil:
		return nil, "the policies it selects have no latest image yet: open them below"
	}
	return nil, ""
}

func sourceFix(s subject) (*ObjectLink, string) {
	if a := s.automation; a != nil && a.Spec.SourceRef != nil {
		src := a.Spec.SourceRef
		return pageOf(orText(src.Kind, "GitRepository"), orText(src.Namespace, a.Namespace), src.Name),
			"create it, or correct spec.sourceRef"
	}
	return nil, "create the source it names, or correct the reference"
}
