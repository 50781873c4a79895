package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/apis/meta"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

// testBatch writes a batch as the controllers would (pkg/apis/update/v1beta1
// members.go): automation web's UpdateJob web-1 carries the updates of its
// members api and docs too, and succeeded with commit cccc, with api's
// change in it and docs failed; web-2, of web and api, is running. Each of
// the three automations is explained, and its run followed, with the batch
// as its own job: its own outcome, change, message and markers, never
// another's, and the batch in flight as its own job in flight; the leader
// keeps its own commit and changes.
func testBatch(t *testing.T, c *explainCluster) {
	ctx := context.Background()
	ns := "batch"
	c.create(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, nil)
	names := []string{"web", "api", "docs"}
	autos := map[string]*imagev1.ImageUpdateAutomation{}
	for _, name := range names {
		a := &imagev1.ImageUpdateAutomation{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: imagev1.ImageUpdateAutomationSpec{
				Interval: metav1.Duration{Duration: time.Hour},
				// Not installed here: explain says so at once, listing
				// no branch.
				SourceRef: &imagev1.CrossNamespaceSourceReference{Name: "fleet"},
				GitSpec:   imagev1.GitSpec{Commit: updatev1.CommitSpec{Author: updatev1.CommitUser{Email: "bot@example.com"}}},
				Update:    &imagev1.UpdateStrategy{Strategy: imagev1.UpdateStrategySetters, Path: name},
			}}
		c.create(t, a, nil)
		autos[name] = a
	}
	update := func(name string) updatev1.UpdateSpec {
		return updatev1.UpdateSpec{Path: name, Setters: []updatev1.PolicySetter{
			{Policy: ns + ":" + name, ImageRef: meta.ImageRef{Name: "ghcr.io/org/" + name, Tag: "9.9.9"}}}}
	}
	change := func(file, setter, from, to string) *updatev1.UpdateResult {
		return &updatev1.UpdateResult{
			Files: []meta.FileResult{{Path: file, Objects: []meta.ObjectResult{{ObjectID: meta.ObjectID{Kind: "Deployment", Namespace: ns, Name: setter},
				Changes: []meta.Change{{OldValue: from, NewValue: to, Setter: ns + ":" + setter}}}}}},
			Markers: []updatev1.PolicyMarkers{{Policy: ns + ":" + setter, Count: 1, Files: []string{file}}},
		}
	}
	batch := func(name string, status func(*updatev1.UpdateJob), members ...string) *updatev1.UpdateJob {
		yes := true
		web := autos["web"]
		j := &updatev1.UpdateJob{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: imagev1.GroupVersion.String(), Kind: imagev1.ImageUpdateAutomationKind,
				Name: web.Name, UID: web.UID, Controller: &yes}}},
			Spec: updatev1.UpdateJobSpec{
				Repository: updatev1.GitRepositorySpec{URL: "https://git.example.com/org/fleet"},
				Checkout:   updatev1.GitCheckoutSpec{Reference: updatev1.GitRepositoryRef{Branch: "main"}},
				Commit:     updatev1.CommitSpec{Author: updatev1.CommitUser{Email: "bot@example.com"}},
				Update:     update(web.Name),
			}}
		for _, m := range members {
			j.Spec.Members = append(j.Spec.Members, updatev1.UpdateJobMember{Automation: m, UID: autos[m].UID, Update: update(m)})
		}
		c.create(t, j, func() { status(j) })
		return j
	}
	done := batch("web-1", func(j *updatev1.UpdateJob) {
		j.Status.Phase = updatev1.UpdateJobSucceeded
		j.Status.CheckoutRevision = "main@sha1:aaaa"
		j.Status.PushedCommit, j.Status.PushedRefs = "cccc", []string{"refs/heads/main"}
		j.Status.Result = change("web.yaml", "web", "web:1.0.0", "web:1.1.0")
		conditions.MarkReady(j, conditions.SucceededReason, "pushed cccc")
		j.Status.Members = []updatev1.MemberStatus{
			{UID: autos["api"].UID, Automation: "api", Phase: updatev1.UpdateJobSucceeded, PushedCommit: "cccc",
				Result: change("api.yaml", "api", "api:2.0.0", "api:2.1.0"), Reason: conditions.SucceededReason, Message: "api's change is in cccc"},
			{UID: autos["docs"].UID, Automation: "docs", Phase: updatev1.UpdateJobFailed, Reason: updatev1.UpdateFailedReason, Message: "docs/site.yaml is not YAML"},
		}
	}, "api", "docs")
	batch("web-2", func(j *updatev1.UpdateJob) { j.Status.Phase = updatev1.UpdateJobRunning }, "api")
	// Each automation's status names the batch as its last job, as the
	// automation controller records it.
	for _, a := range autos {
		a.Status.LastJob = &imagev1.UpdateJobReference{Name: done.Name, UID: done.UID}
		if err := c.env.Client.Status().Update(ctx, a); err != nil {
			t.Fatalf("writing the status of %s: %v", a.Name, err)
		}
	}

	t.Run("explain", func(t *testing.T) {
		tests := []struct {
			automation string
			phase      updatev1.UpdateJobPhase
			commit     string
			ready      string
			inFlight   string
			wants      []string
		}{
			{"web", updatev1.UpdateJobSucceeded, "cccc", conditions.SucceededReason, "web-2", []string{
				"Pushed:\tcccc to refs/heads/main", "web/web.yaml Deployment/" + ns + "/web: web:1.0.0 -> web:1.1.0 (" + ns + ":web)",
				"Markers (from UpdateJob web-1 status.result):"}},
			{"api", updatev1.UpdateJobSucceeded, "cccc", conditions.SucceededReason, "web-2", []string{
				"Pushed:\tcccc to refs/heads/main", "api/api.yaml Deployment/" + ns + "/api: api:2.0.0 -> api:2.1.0 (" + ns + ":api)",
				"api's change is in cccc"}},
			{"docs", updatev1.UpdateJobFailed, "", updatev1.UpdateFailedReason, "", []string{
				"Last job:\tweb-1 (Failed)", "docs/site.yaml is not YAML"}},
		}
		for _, tt := range tests {
			t.Run(tt.automation, func(t *testing.T) {
				code, text, errs := c.explain(t, "automation", tt.automation, "-n", ns)
				if code != 0 {
					t.Fatalf("code %d, stderr %q", code, errs)
				}
				code, out, errs := c.explain(t, "automation", tt.automation, "-n", ns, "-o", "json")
				type job struct {
					Name         string                  `json:"name"`
					Phase        updatev1.UpdateJobPhase `json:"phase"`
					PushedCommit string                  `json:"pushedCommit"`
					Ready        *metav1.Condition       `json:"ready"`
				}
				var e struct {
					LastJob     *job `json:"lastJob"`
					InFlightJob *job `json:"inFlightJob"`
				}
				if err := json.Unmarshal([]byte(out), &e); code != 0 || err != nil {
					t.Fatalf("-o json: code %d, %v, stderr %q:\n%s", code, err, errs, out)
				}
				j := e.LastJob
				if j == nil || j.Name != "web-1" || j.Phase != tt.phase || j.PushedCommit != tt.commit || j.Ready == nil || j.Ready.Reason != tt.ready {
					t.Fatalf("last job %+v, want web-1 %s with commit %q, Ready reason %s", j, tt.phase, tt.commit, tt.ready)
				}
				if got := e.InFlightJob; (got == nil) != (tt.inFlight == "") || (got != nil && (got.Name != tt.inFlight || got.Phase != updatev1.UpdateJobRunning)) {
					t.Errorf("job in flight %+v, want %q", got, tt.inFlight)
				}
				mustContain(t, "explain automation "+tt.automation, text, tt.wants...)
				// Each automation's markers and changes are its own, never
				// another's of the same batch.
				for _, other := range names {
					if other != tt.automation && strings.Contains(text, "Deployment/"+ns+"/"+other) {
						t.Errorf("%s's explanation shows %s's change:\n%s", tt.automation, other, text)
					}
					if m := ns + ":" + other; other != tt.automation && strings.Contains(text, m) {
						t.Errorf("%s's explanation names %s's marker:\n%s", tt.automation, m, text)
					}
				}
			})
		}
	})

	// job run --from-automation follows the job the automation ran as that
	// automation's own (followJob with its UID): for a member, its own
	// change in the batch's commit, or its own failure while the batch
	// succeeded; for the leader, its own change.
	t.Run("follow", func(t *testing.T) {
		pushed := "UpdateJob " + ns + "/web-1: Succeeded\nchecked out main@sha1:aaaa\npushed commit cccc to refs/heads/main\n"
		tests := []struct {
			automation string
			out, fail  string
		}{
			{"web", pushed + "web/web.yaml\n  Deployment/" + ns + "/web\n    web:1.0.0 -> web:1.1.0 (" + ns + ":web)\n", ""},
			{"api", pushed + "api/api.yaml\n  Deployment/" + ns + "/api\n    api:2.0.0 -> api:2.1.0 (" + ns + ":api)\n", ""},
			{"docs", "UpdateJob " + ns + "/web-1: Failed\nchecked out main@sha1:aaaa\n", "UpdateFailed: docs/site.yaml is not YAML"},
		}
		for _, tt := range tests {
			t.Run(tt.automation, func(t *testing.T) {
				var out strings.Builder
				err := followJob(t.Context(), c.env.Client, types.NamespacedName{Namespace: ns, Name: done.Name}, autos[tt.automation].UID, 5*time.Second, &out)
				if out.String() != tt.out || (err == nil) != (tt.fail == "") || (err != nil && !strings.Contains(err.Error(), tt.fail)) {
					t.Errorf("out %q, err %v; want %q, %q", out.String(), err, tt.out, tt.fail)
				}
			})
		}
	})
}
