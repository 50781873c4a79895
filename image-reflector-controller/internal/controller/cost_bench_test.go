package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testenv"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
)

// BenchmarkBuildTimeCost measures, through the reflector's reconcilers and a
// real registry, the registry requests (manifest and config reads) that
// soak time and newestBuild cost on a repository of 1,000 tags, each
// built an hour after the previous one: the first evaluation (cold), the
// next one (warm), and the one after a new tag is pushed and scanned.
// Reported per scenario, not timed: run it with
//
//	go test -run '^$' -bench BenchmarkBuildTimeCost -benchtime 1x ./image-reflector-controller/internal/controller/
func BenchmarkBuildTimeCost(b *testing.B) {
	scenarios := []struct {
		name   string
		policy func(*imagev1.ImagePolicy)
	}{
		{"minimumAge-72h-seen", func(p *imagev1.ImagePolicy) {
			p.Spec.MinimumAge = &imagev1.MinimumAge{Duration: metav1.Duration{Duration: 72 * time.Hour}, Source: imagev1.AgeSeen}
		}},
		{"minimumAge-72h-created", func(p *imagev1.ImagePolicy) {
			p.Spec.MinimumAge = &imagev1.MinimumAge{Duration: metav1.Duration{Duration: 72 * time.Hour}, Source: imagev1.AgeCreated}
		}},
		{"newestBuild-100", func(p *imagev1.ImagePolicy) {
			p.Spec.Policy = imagev1.ImagePolicyChoice{NewestBuild: &imagev1.NewestBuildPolicy{MaxCandidates: 100}}
		}},
		{"newestBuild-1000", func(p *imagev1.ImagePolicy) {
			p.Spec.Policy = imagev1.ImagePolicyChoice{NewestBuild: &imagev1.NewestBuildPolicy{MaxCandidates: 1000}}
		}},
	}
	for _, sc := range scenarios {
		b.Run(sc.name, func(b *testing.B) {
			// A registry of its own per scenario: a new tag of one
			// scenario must not make the next repository 1,001 tags.
			reg := testregistry.New(b, testregistry.Options{})
			now := time.Now().UTC().Truncate(time.Second)
			for i := range 1000 {
				reg.PushBuilt(b, "app", fmt.Sprintf("1.0.%d", i), now.Add(-time.Duration(1000-i)*time.Hour))
			}
			ns := env.Namespace(b)
			repo := repoFor(ns, "app", reg, "app")
			if err := env.Client.Create(context.Background(), repo); err != nil {
				b.Fatal(err)
			}
			benchWait(b, repo, conditions.SucceededReason, "")
			reads := func() int64 { return reg.ManifestRequests() + reg.BlobRequests() }

			p := policyFor(ns, "p", "app", semverChoice("*"))
			sc.policy(p)
			before := reads()
			if err := env.Client.Create(context.Background(), p); err != nil {
				b.Fatal(err)
			}
			want := conditions.SucceededReason
			if p.Spec.MinimumAge != nil && p.Spec.MinimumAge.Source == imagev1.AgeSeen {
				want = imagev1.MinimumAgeNotReachedReason // every tag was first seen just now
			}
			benchWait(b, p, want, "")
			cold := reads() - before

			before = reads()
			token := time.Now().Format(time.RFC3339Nano)
			requestReconcile(b, p, token)
			benchWait(b, p, want, token)
			warm := reads() - before

			reg.PushBuilt(b, "app", "1.0.1000", now)
			before = reads()
			token = time.Now().Format(time.RFC3339Nano) + "-scan"
			requestReconcile(b, repo, token)
			benchWait(b, repo, conditions.SucceededReason, token)
			testenv.Eventually(b, waitFor, func() (bool, error) {
				err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(p), p)
				return p.Status.LastSelection != nil && p.Status.LastSelection.ScanRevision == repo.Status.LastScanResult.Revision, err
			})
			newTag := reads() - before
			chosen := "-"
			if p.Status.LatestRef != nil {
				chosen = p.Status.LatestRef.Tag
			}
			b.Logf("%s: chose %s, pending %+v; manifest+config reads: cold %d, warm %d, new tag %d",
				sc.name, chosen, p.Status.PendingRef, cold, warm, newTag)
			b.ReportMetric(float64(cold), "reads-cold")
			b.ReportMetric(float64(warm), "reads-warm")
			b.ReportMetric(float64(newTag), "reads-new-tag")
			for range b.N {
			}
		})
	}
}

// benchWait waits for a Ready reason of the current generation and, when
// token is set, for that reconcile request to be handled.
func benchWait(b *testing.B, obj client.Object, reason, token string) {
	b.Helper()
	testenv.Eventually(b, 2*time.Minute, func() (bool, error) {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return false, err
		}
		cond := conditions.Get(obj.(conditions.Getter), conditions.ReadyCondition)
		handled := token == ""
		switch o := obj.(type) {
		case *imagev1.ImagePolicy:
			handled = handled || o.Status.LastHandledReconcileAt == token
		case *imagev1.ImageRepository:
			handled = handled || o.Status.LastHandledReconcileAt == token
		}
		return handled && cond != nil && cond.Reason == reason && cond.ObservedGeneration == obj.GetGeneration(), nil
	})
}
