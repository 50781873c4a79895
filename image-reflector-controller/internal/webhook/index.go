package webhook

import (
	"github.com/google/go-containerregistry/pkg/name"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/imagename"
)

// PathIndex is the field index of ImageWebhooks by status.webhookPath.
// ImageRepositories are indexed by repository path (library/nginx for
// nginx, indexRepositoryPath) in an index.Index: senders that do not say
// the host look up by it, and a canonical name (imagename.Canonical:
// docker.io/library/nginx) by its path, its host checked after.
const PathIndex = ".status.webhookPath"

func indexPath(o client.Object) []string {
	w, ok := o.(*imagev1.ImageWebhook)
	if !ok || w.Status.WebhookPath == "" {
		return nil
	}
	return []string{w.Status.WebhookPath}
}

// canonical parses spec.image as NewRepository does for a scan; an image
// that does not parse has no key, and is never triggered.
func canonical(o client.Object) (name.Repository, bool) {
	r, ok := o.(*imagev1.ImageRepository)
	if !ok {
		return name.Repository{}, false
	}
	repo, err := name.NewRepository(r.Spec.Image)
	if err != nil {
		return name.Repository{}, false
	}
	return repo, true
}

// canonicalName is the repository's imagename.Canonical, "" when its image
// does not parse.
func canonicalName(o client.Object) string {
	if repo, ok := canonical(o); ok {
		return imagename.Canonical(repo)
	}
	return ""
}

func indexRepositoryPath(o client.Object) []string {
	if repo, ok := canonical(o); ok {
		return []string{repo.RepositoryStr()}
	}
	return nil
}
