package healthwatch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/health"
	"toolkit.dev/image-toolkit/pkg/runtime/conditions"
)

// Other clusters. A healthOf reference with kubeConfig is read from the
// cluster its kubeconfig Secret reaches, as Flux's Kustomization and
// HelmRelease reach theirs: dev's Flux reports dev's health in dev's
// cluster, and the automation that writes prod's manifests runs
// elsewhere.
//
// Each remote cluster (one per kubeconfig, by the digest of its bytes, so
// that two Secrets of one kubeconfig share it) gets one watch per kind,
// started the first time a reader names the kind there, shared by every
// reader and stopped with the cluster once no reader names it. A watch
// keeps of each object only what a verdict reads (its identity, generation
// and status), so a remote cluster of thousands of Kustomizations costs
// their statuses, not their specs. A watch that fails (the server
// unreachable, the token expired or without access) is remembered and its
// readers are woken: they report it, and a promotion never moves on a
// cluster it cannot see.
//
// A kubeconfig is written by whoever may write Secrets in the reader's
// namespace, and is run by the controller: one that would run a program
// (exec, auth-provider), read a file of the controller's disk (a token
// file, a certificate path) or skip TLS verification is refused unless
// the controller's flags allow it, and nothing of it is logged.

// DefaultKubeConfigKeys are the Secret keys read when a secretRef names
// none, in order, as Flux reads them.
var DefaultKubeConfigKeys = []string{"value", "value.yaml"}

// syncWait bounds how long a read waits for a new watch's first list
// before it reports the cluster unreachable; the watch goes on, and its
// first answer wakes the reader.
const syncWait = 10 * time.Second

// RemoteOptions are the controller's flags about kubeconfigs.
type RemoteOptions struct {
	// AllowExec lets kubeconfigs run exec and auth-provider plugins.
	AllowExec bool
	// AllowInsecureTLS lets kubeconfigs skip the server's TLS verification.
	AllowInsecureTLS bool
}

// BindFlags binds --insecure-kubeconfig-exec and --insecure-kubeconfig-tls,
// Flux's names for the same choices.
func (o *RemoteOptions) BindFlags(fs *flag.FlagSet) {
	fs.BoolVar(&o.AllowExec, "insecure-kubeconfig-exec", false,
		"Let the kubeconfigs of healthOf[].kubeConfig run exec and auth-provider plugins: programs on the controller's host, named by whoever may write the Secret.")
	fs.BoolVar(&o.AllowInsecureTLS, "insecure-kubeconfig-tls", false,
		"Let the kubeconfigs of healthOf[].kubeConfig skip TLS verification of the remote API server.")
}

// remotes are the remote clusters in use and their readers.
type remotes struct {
	mu       sync.Mutex
	clusters map[string]*remoteCluster                // by kubeconfig digest
	users    map[types.NamespacedName]map[string]bool // reader → cluster digests
}

// remoteCluster is one cluster's watches.
type remoteCluster struct {
	id     string
	dyn    dynamic.Interface
	mapper meta.RESTMapper
	ctx    context.Context
	stop   context.CancelFunc
	wake   func(key string) // enqueues the readers of a Key

	mu    sync.Mutex
	kinds map[schema.GroupVersionKind]*remoteKind
	// via are the Secret references (ns/name/key) that reach this
	// cluster: an object's Key is made once per reference.
	via map[string]bool
}

// remoteKind is one kind's watch in a remote cluster.
type remoteKind struct {
	informer toolscache.SharedIndexInformer
	mu       sync.Mutex
	err      error // the watch's last failure; nil once it lists again
}

func (k *remoteKind) lastErr() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err
}

// setErr records the watch's state and says whether it changed.
func (k *remoteKind) setErr(err error) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	changed := (k.err == nil) != (err == nil) || (err != nil && k.err.Error() != err.Error())
	k.err = err
	return changed
}

// remoteVia names a Secret reference in a Key: the same object read
// through two Secrets is two health objects, each the readers of one.
func remoteVia(namespace string, ref *imagev1.HealthObjectReference) string {
	if cm := ref.KubeConfig.ConfigMapRef; cm != nil {
		return namespace + "/configmap:" + cm.Name
	}
	s := ref.KubeConfig.SecretRef
	return namespace + "/" + s.Name + "/" + s.Key
}

// remoteName is what names the cluster of ref in messages and statuses:
// its Secret's or ConfigMap's name.
func remoteName(ref *imagev1.HealthObjectReference) string {
	if cm := ref.KubeConfig.ConfigMapRef; cm != nil {
		return cm.Name
	}
	if s := ref.KubeConfig.SecretRef; s != nil {
		return s.Name
	}
	return ""
}

// remoteKey is the Key of an object read through via.
func remoteKey(via, group, kind, namespace, name string) string {
	return "kubeconfig=" + via + "|" + Key(group, kind, namespace, name)
}

// kubeConfigFrom reads and checks the kubeconfig of ref, a reader in
// namespace: what identifies the cluster (the Secret's bytes, or the
// ConfigMap's data with the namespace whose ServiceAccounts it may name)
// and the client configuration.
func (w *Watches) kubeConfigFrom(ctx context.Context, namespace string, ref *imagev1.HealthObjectReference) ([]byte, *rest.Config, error) {
	if ref.KubeConfig.ConfigMapRef != nil {
		return w.cloudConfig(ctx, namespace, ref)
	}
	secrets, opts := w.Secrets, w.Remote
	sr := ref.KubeConfig.SecretRef
	if sr == nil {
		return nil, nil, conditions.Stallf(imagev1.InvalidPolicyReason, "healthOf %s/%s: kubeConfig needs a secretRef or a configMapRef", ref.Kind, ref.Name)
	}
	key := types.NamespacedName{Namespace: namespace, Name: sr.Name}
	secret := &corev1.Secret{}
	if err := secrets.Get(ctx, key, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, conditions.Retryf(conditions.SecretNotFoundReason, "healthOf %s/%s: kubeConfig Secret %s not found", ref.Kind, ref.Name, key).After(time.Minute)
		}
		return nil, nil, err
	}
	keys := DefaultKubeConfigKeys
	if sr.Key != "" {
		keys = []string{sr.Key}
	}
	var data []byte
	for _, k := range keys {
		if data = secret.Data[k]; len(data) > 0 {
			break
		}
	}
	if len(data) == 0 {
		return nil, nil, conditions.Retryf(imagev1.InvalidSecretReason, "healthOf %s/%s: kubeConfig Secret %s has no key %s holding a kubeconfig",
			ref.Kind, ref.Name, key, strings.Join(keys, " or ")).After(time.Minute)
	}
	cfg, err := restConfig(data, opts)
	if err != nil {
		return nil, nil, conditions.Retryf(imagev1.InvalidSecretReason, "healthOf %s/%s: the kubeconfig in Secret %s: %v", ref.Kind, ref.Name, key, err).After(time.Minute)
	}
	return data, cfg, nil
}

// restConfig is the client configuration of a kubeconfig's current
// context, refused when it would run a program, read the controller's
// files or skip TLS verification against opts. The errors name fields,
// never values: a kubeconfig holds credentials.
func restConfig(data []byte, opts RemoteOptions) (*rest.Config, error) {
	kc, err := clientcmd.Load(data)
	if err != nil {
		return nil, errors.New("it does not parse as a kubeconfig")
	}
	ctxName := kc.CurrentContext
	c, ok := kc.Contexts[ctxName]
	if !ok {
		return nil, fmt.Errorf("its current-context %q is not one of its contexts", ctxName)
	}
	cluster, user := kc.Clusters[c.Cluster], kc.AuthInfos[c.AuthInfo]
	if cluster == nil {
		return nil, fmt.Errorf("context %q names no cluster it defines", ctxName)
	}
	if err := checkFiles(cluster, user); err != nil {
		return nil, err
	}
	if user != nil && !opts.AllowExec {
		if user.Exec != nil {
			return nil, errors.New("its user runs an exec plugin, which this controller refuses (--insecure-kubeconfig-exec allows it)")
		}
		if user.AuthProvider != nil {
			return nil, errors.New("its user runs an auth-provider plugin, which this controller refuses (--insecure-kubeconfig-exec allows it)")
		}
	}
	if cluster.InsecureSkipTLSVerify && !opts.AllowInsecureTLS {
		return nil, errors.New("it skips TLS verification (insecure-skip-tls-verify), which this controller refuses (--insecure-kubeconfig-tls allows it)")
	}
	cfg, err := clientcmd.NewNonInteractiveClientConfig(*kc, ctxName, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("it makes no client configuration: %v", redactConfigError(err))
	}
	// Watches live for hours: no whole-request timeout, but a bounded
	// dial and TLS handshake, keep-alives and HTTP/2 pings (client-go's
	// default) to notice a server that went away.
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	cfg.Dial = d.DialContext
	cfg.QPS, cfg.Burst = 20, 40
	cfg.UserAgent = "image-toolkit-healthwatch"
	return cfg, nil
}

// checkFiles refuses a kubeconfig that names paths: read by the
// controller, they would send its own files (its service account token)
// to whichever server the kubeconfig names.
func checkFiles(cluster *clientcmdapi.Cluster, user *clientcmdapi.AuthInfo) error {
	var files []string
	if cluster.CertificateAuthority != "" {
		files = append(files, "certificate-authority")
	}
	if user != nil {
		for name, v := range map[string]string{"client-certificate": user.ClientCertificate, "client-key": user.ClientKey, "tokenFile": user.TokenFile} {
			if v != "" {
				files = append(files, name)
			}
		}
	}
	if len(files) == 0 {
		return nil
	}
	sort.Strings(files)
	return fmt.Errorf("it names files (%s); a kubeconfig in a Secret must carry its data inline (certificate-authority-data, client-certificate-data, client-key-data, token)", strings.Join(files, ", "))
}

// redactConfigError keeps client-go's message short of anything it quotes.
func redactConfigError(err error) string {
	msg := err.Error()
	if i := strings.IndexAny(msg, "\n"); i >= 0 {
		msg = msg[:i]
	}
	return msg
}

// cluster returns the watches of the cluster cfg reaches, made on first
// use; wake enqueues a Key's readers.
func (w *Watches) cluster(data []byte, cfg *rest.Config) (*remoteCluster, error) {
	sum := sha256.Sum256(data)
	id := hex.EncodeToString(sum[:])
	r := &w.remote
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.clusters[id]; c != nil {
		return c, nil
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dcfg := rest.CopyConfig(cfg)
	dcfg.Timeout = 30 * time.Second // discovery requests are short
	dc, err := discovery.NewDiscoveryClientForConfig(dcfg)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	c := &remoteCluster{id: id, dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)),
		ctx: ctx, stop: stop, wake: w.wakeKey, kinds: map[schema.GroupVersionKind]*remoteKind{}, via: map[string]bool{}}
	if r.clusters == nil {
		r.clusters = map[string]*remoteCluster{}
	}
	r.clusters[id] = c
	return c, nil
}

// use records that reader reads the clusters ids (and, with keep, those
// it read before), and no others: a cluster no reader names any longer
// stops its watches.
func (w *Watches) use(reader types.NamespacedName, ids map[string]bool, keep bool) {
	r := &w.remote
	r.mu.Lock()
	defer r.mu.Unlock()
	if keep {
		for id := range r.users[reader] {
			ids[id] = true
		}
	}
	if len(ids) == 0 {
		delete(r.users, reader)
	} else {
		if r.users == nil {
			r.users = map[types.NamespacedName]map[string]bool{}
		}
		r.users[reader] = ids
	}
	inUse := map[string]bool{}
	for _, s := range r.users {
		for id := range s {
			inUse[id] = true
		}
	}
	for id, c := range r.clusters {
		if !inUse[id] {
			c.stop()
			delete(r.clusters, id)
		}
	}
}

// Forget is told that reader no longer reads health (deleted, or its
// spec names none): the remote clusters only it named stop.
func (w *Watches) Forget(reader types.NamespacedName) { w.use(reader, nil, false) }

// RemoteClusters is how many remote clusters are watched, for tests and
// metrics.
func (w *Watches) RemoteClusters() int {
	w.remote.mu.Lock()
	defer w.remote.mu.Unlock()
	return len(w.remote.clusters)
}

// kind returns the cluster's watch of gvk, started on first use.
func (c *remoteCluster) kind(gvk schema.GroupVersionKind) (*remoteKind, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if k := c.kinds[gvk]; k != nil {
		return k, nil
	}
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	inf := dynamicinformer.NewFilteredDynamicInformer(c.dyn, m.Resource, "", 0, toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc}, nil).Informer()
	k := &remoteKind{informer: inf}
	if err := inf.SetTransform(trimForHealth); err != nil {
		return nil, err
	}
	if err := inf.SetWatchErrorHandler(func(_ *toolscache.Reflector, err error) {
		if k.setErr(err) {
			c.wakeKind(gvk, inf)
		}
	}); err != nil {
		return nil, err
	}
	onChange := func(old, obj any) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			if d, isTomb := obj.(toolscache.DeletedFinalStateUnknown); isTomb {
				u, ok = d.Obj.(*unstructured.Unstructured)
			}
			if !ok {
				return
			}
		}
		recovered := k.setErr(nil)
		if o, isU := old.(*unstructured.Unstructured); isU && !recovered && !(statusChanged{}).changed(o, u) {
			return
		}
		c.wakeObject(gvk, u)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { onChange(nil, obj) },
		UpdateFunc: onChange,
		DeleteFunc: func(obj any) { onChange(nil, obj) },
	}); err != nil {
		return nil, err
	}
	go inf.RunWithContext(c.ctx)
	c.kinds[gvk] = k
	return k, nil
}

// wakeObject enqueues the readers of u, through each Secret that reaches
// the cluster.
func (c *remoteCluster) wakeObject(gvk schema.GroupVersionKind, u *unstructured.Unstructured) {
	c.mu.Lock()
	via := make([]string, 0, len(c.via))
	for v := range c.via {
		via = append(via, v)
	}
	c.mu.Unlock()
	for _, v := range via {
		c.wake(remoteKey(v, gvk.Group, gvk.Kind, u.GetNamespace(), u.GetName()))
	}
}

// wakeKind enqueues the readers of every object of a kind whose watch
// failed or recovered: they say so in their status. The objects are the
// ones the watch last listed; a reader of one it never listed learns it
// at its next read.
func (c *remoteCluster) wakeKind(gvk schema.GroupVersionKind, inf toolscache.SharedIndexInformer) {
	for _, o := range inf.GetStore().List() {
		if u, ok := o.(*unstructured.Unstructured); ok {
			c.wakeObject(gvk, u)
		}
	}
}

// trimForHealth keeps of a remote object what a verdict reads: its kind,
// identity, generation and status.
func trimForHealth(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	out := &unstructured.Unstructured{Object: map[string]any{}}
	out.SetAPIVersion(u.GetAPIVersion())
	out.SetKind(u.GetKind())
	out.SetNamespace(u.GetNamespace())
	out.SetName(u.GetName())
	out.SetUID(u.GetUID())
	out.SetResourceVersion(u.GetResourceVersion())
	out.SetGeneration(u.GetGeneration())
	if st, ok := u.Object["status"]; ok {
		out.Object["status"] = st
	}
	return out, nil
}

// readRemote reads one reference through its kubeconfig. The cluster's
// id is returned whenever the kubeconfig was good, so that the reader
// keeps the cluster's watches while it reports the cluster's failures.
func (w *Watches) readRemote(ctx context.Context, ref *imagev1.HealthObjectReference, gvk schema.GroupVersionKind, namespace, invalidReason string, retry time.Duration) (health.Object, string, error) {
	ns := orDefault(ref.Namespace, namespace)
	name := fmt.Sprintf("%s/%s/%s@%s", ref.Kind, ns, ref.Name, remoteName(ref))
	if w.Secrets == nil {
		return health.Object{}, "", conditions.Stallf(invalidReason, "healthOf %s: this controller reads no other cluster", name)
	}
	data, cfg, err := w.kubeConfigFrom(ctx, namespace, ref)
	if err != nil {
		return health.Object{}, "", err
	}
	c, err := w.cluster(data, cfg)
	if err != nil {
		return health.Object{}, "", conditions.Retryf(invalidReason, "healthOf %s: %v", name, err).After(retry)
	}
	c.mu.Lock()
	c.via[remoteVia(namespace, ref)] = true
	c.mu.Unlock()
	unreachable := func(err error) (health.Object, string, error) {
		return health.Object{Name: name, Found: true, Health: health.Health{State: health.Unknown,
			Reason: imagev1.RemoteClusterUnreachableReason, Message: remoteMessage(err)}}, c.id, nil
	}
	k, err := c.kind(gvk)
	switch {
	case meta.IsNoMatchError(err):
		return health.Object{}, c.id, conditions.Retryf(conditions.DependencyNotReadyReason, "healthOf %s: that cluster does not serve %s", name, gvk).After(retry)
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return health.Object{}, c.id, conditions.Retryf(conditions.AccessDeniedReason, "healthOf %s: %s", name, remoteMessage(err)).After(retry)
	case err != nil:
		return unreachable(err)
	}
	if !k.informer.HasSynced() {
		wctx, cancel := context.WithTimeout(ctx, syncWait)
		toolscache.WaitForCacheSync(wctx.Done(), k.informer.HasSynced)
		cancel()
	}
	if err := k.lastErr(); err != nil {
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
			return health.Object{}, c.id, conditions.Retryf(conditions.AccessDeniedReason, "healthOf %s: %s", name, remoteMessage(err)).After(retry)
		}
		return unreachable(err)
	}
	if !k.informer.HasSynced() {
		return unreachable(fmt.Errorf("no answer to the list of %s within %s", gvk.Kind, syncWait))
	}
	o, found, err := k.informer.GetStore().GetByKey(ns + "/" + ref.Name)
	if err != nil {
		return health.Object{}, c.id, err
	}
	if !found {
		return health.Object{Name: name}, c.id, nil
	}
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return health.Object{}, c.id, fmt.Errorf("healthOf %s: the watch holds a %T", name, o)
	}
	u = u.DeepCopy()
	u.SetGroupVersionKind(gvk)
	return health.Object{Name: name, Found: true, Health: health.Of(u)}, c.id, nil
}

// remoteMessage is a remote failure in the API server's words, cut at a
// status's length.
func remoteMessage(err error) string {
	msg := err.Error()
	if s := (apierrors.APIStatus)(nil); errors.As(err, &s) {
		msg = s.Status().Message
	}
	if len(msg) > 240 {
		msg = msg[:240] + "…"
	}
	return msg
}
