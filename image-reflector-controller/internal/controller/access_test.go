package controller

import (
	"net/http/httptest"
	"net/http/httputil"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
	"toolkit.dev/image-toolkit/pkg/testing/testregistry"
)

func TestServiceAccountPullSecrets(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{Username: "bot", Password: "sa-pass"})
	reg.PushTags(t, "app", []string{"1.0.0"})
	ns := namespace(t)
	sa := &corev1.ServiceAccount{
		ObjectMeta:       metav1.ObjectMeta{Name: "puller", Namespace: ns},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "pull"}},
	}
	repo := repoFor(ns, "via-sa", reg, "app")
	repo.Spec.ServiceAccountName = "puller"
	create(t, dockerSecret(ns, "pull", reg, "bot", "sa-pass"), sa, repo)
	waitReason(t, repo, conditions.SucceededReason)
}

// proxySecretRef routes registry traffic through the proxy.
func TestProxySecret(t *testing.T) {
	reg := testregistry.New(t, testregistry.Options{})
	reg.PushTags(t, "app", []string{"1.0.0"})
	var proxied atomic.Int64
	// A forward proxy for plain HTTP: requests arrive with absolute URLs.
	proxy := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		proxied.Add(1)
		r.Out.URL = r.In.URL
		r.Out.Host = r.In.URL.Host
	}})
	defer proxy.Close()
	ns := namespace(t)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "proxy", Namespace: ns},
		Data: map[string][]byte{"address": []byte(proxy.URL)}}
	repo := repoFor(ns, "proxied", reg, "app")
	repo.Spec.ProxySecretRef = &meta.LocalObjectReference{Name: "proxy"}
	create(t, secret, repo)
	waitReason(t, repo, conditions.SucceededReason)
	if proxied.Load() == 0 {
		t.Error("no request went through the proxy")
	}
}
