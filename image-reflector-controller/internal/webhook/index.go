package webhook

import (
	"github.com/google/go-containerregistry/pkg/name"
	"sigs.k8s.io/controller-runtime/pkg/client"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/imagename"
)

// Field indexes the receiver looks objects up by.
const (
	// PathIndex indexes ImageWebhooks by status.webhookPath.
	PathIndex = ".status.webhookPath"
	// RepositoryPathIndex indexes ImageRepositories by repository path
	// (library/nginx for nginx): senders that do not say the host look
	// up by it, and a canonical name (imagename.Canonical:
	// docker.io/library/nginx) by its path, its host checked after.
	RepositoryPathIndex = ".spec.image.path"
)

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
