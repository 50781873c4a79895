package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	updatev1 "toolkit.dev/image-toolkit/pkg/apis/update/v1beta1"
)

// kube holds kubectl's connection flags (--kubeconfig, --context, -n, ...,
// from k8s.io/cli-runtime, so they mean what they mean to kubectl) and makes
// the clients the cluster commands use.
type kube struct {
	flags *genericclioptions.ConfigFlags
	// timeout is the --request-timeout flag, once added.
	timeout *pflag.Flag
}

// defaultRequestTimeout bounds each API request unless --request-timeout
// says otherwise (kubectl's default is none; a CLI that hangs on a dead
// server helps no one).
const defaultRequestTimeout = 30 * time.Second

func newKube() *kube {
	k := &kube{flags: genericclioptions.NewConfigFlags(true)}
	k.flags.WrapConfigFn = k.defaultTimeout
	return k
}

// defaultTimeout gives the config the default request timeout unless
// --request-timeout was given. It is applied to the config, not as the
// flag's value: a flag value is a kubeconfig override, and client-go falls
// back to the in-cluster config only when the kubeconfig adds nothing to
// the defaults, so tk-image in a pod (the chart's dashboard) would
// otherwise talk to localhost:8080.
func (k *kube) defaultTimeout(c *rest.Config) *rest.Config {
	if k.timeout == nil || !k.timeout.Changed {
		c.Timeout = defaultRequestTimeout
	}
	return c
}

// watchGetter is the flags' client getter without the request timeout:
// a watch is one long request, which the API server itself ends (after
// --min-request-timeout), and get --watch then starts the next.
type watchGetter struct{ *genericclioptions.ConfigFlags }

func (g watchGetter) ToRESTConfig() (*rest.Config, error) {
	cfg, err := g.ConfigFlags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = 0
	return cfg, nil
}

// namespace is -n, else the kubeconfig context's namespace, else default.
func (k *kube) namespace() (string, error) {
	ns, _, err := k.flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", fmt.Errorf("reading kubeconfig: %w", err)
	}
	return ns, nil
}

// client returns a controller-runtime client that knows the image-toolkit
// kinds, with watch support for the commands that wait.
func (k *kube) client() (client.WithWatch, error) {
	cfg, err := k.flags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("reading kubeconfig: %w", err)
	}
	return client.NewWithWatch(cfg, client.Options{Scheme: scheme})
}

// scheme knows the kinds tk-image reads and writes.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, authorizationv1.AddToScheme, imagev1.AddToScheme, updatev1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err) // static registration; cannot fail at run time
		}
	}
	return s
}()

// kind is one of the four kinds the commands take by a short name.
type kind struct {
	// name is the singular command word: repository, policy, ...
	name string
	// aliases are the other words accepted for it: plural, the kind and
	// its plural, and the CRD's short name.
	aliases []string
	gvk     schema.GroupVersionKind
	// resource is the plural resource name the API server serves.
	resource string
	newObj   func() client.Object
	newList  func() client.ObjectList
}

var kinds = []kind{
	{
		name:     "repository",
		aliases:  []string{"repositories", "repo", "repos", "imagerepository", "imagerepositories", "imgrepo"},
		gvk:      imagev1.GroupVersion.WithKind(imagev1.ImageRepositoryKind),
		resource: "imagerepositories",
		newObj:   func() client.Object { return &imagev1.ImageRepository{} },
		newList:  func() client.ObjectList { return &imagev1.ImageRepositoryList{} },
	},
	{
		name:     "policy",
		aliases:  []string{"policies", "imagepolicy", "imagepolicies", "imgpol"},
		gvk:      imagev1.GroupVersion.WithKind(imagev1.ImagePolicyKind),
		resource: "imagepolicies",
		newObj:   func() client.Object { return &imagev1.ImagePolicy{} },
		newList:  func() client.ObjectList { return &imagev1.ImagePolicyList{} },
	},
	{
		name:     "automation",
		aliases:  []string{"automations", "imageupdateautomation", "imageupdateautomations", "iua"},
		gvk:      imagev1.GroupVersion.WithKind(imagev1.ImageUpdateAutomationKind),
		resource: "imageupdateautomations",
		newObj:   func() client.Object { return &imagev1.ImageUpdateAutomation{} },
		newList:  func() client.ObjectList { return &imagev1.ImageUpdateAutomationList{} },
	},
	{
		name:     "job",
		aliases:  []string{"jobs", "updatejob", "updatejobs", "uj"},
		gvk:      updatev1.GroupVersion.WithKind(updatev1.UpdateJobKind),
		resource: "updatejobs",
		newObj:   func() client.Object { return &updatev1.UpdateJob{} },
		newList:  func() client.ObjectList { return &updatev1.UpdateJobList{} },
	},
}

// kindNamed returns the kind a command word names, among allowed (all
// kinds when allowed is empty).
func kindNamed(word string, allowed ...string) (kind, error) {
	word = strings.ToLower(word)
	for _, k := range kinds {
		if len(allowed) > 0 && !slices.Contains(allowed, k.name) {
			continue
		}
		if k.name == word || slices.Contains(k.aliases, word) {
			return k, nil
		}
	}
	if len(allowed) == 0 {
		allowed = kindNames()
	}
	return kind{}, usageError{fmt.Errorf("unknown kind %q: want one of %s", word, strings.Join(allowed, ", "))}
}

func kindNames() []string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.name
	}
	return names
}

// qualified is the resource as kubectl names it: imagepolicies.image.toolkit.dev.
func (k kind) qualified() string { return k.resource + "." + k.gvk.Group }

// addKubeFlags adds kubectl's connection flags to a command tree.
func (k *kube) addFlags(cmd *cobra.Command) {
	k.flags.AddFlags(cmd.PersistentFlags())
	if k.timeout = cmd.PersistentFlags().Lookup("request-timeout"); k.timeout != nil {
		k.timeout.DefValue = defaultRequestTimeout.String()
	}
}

// eachItem calls fn with every object of a typed list.
func eachItem(list client.ObjectList, fn func(client.Object) error) error {
	return apimeta.EachListItem(list, func(o runtime.Object) error {
		obj, ok := o.(client.Object)
		if !ok {
			return fmt.Errorf("unexpected list item %T", o)
		}
		return fn(obj)
	})
}

func toUnstructured(obj runtime.Object) (map[string]any, error) {
	return runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
}

func runtimeConvert(m map[string]any, into any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(m, into)
}
