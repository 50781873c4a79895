// Package webhook receives registries' push notifications and turns each
// into an immediate scan of exactly the ImageRepositories it is about. It
// is the ImageWebhook kind of pkg/receiver, which serves the calls (paths,
// authentication, limits, the 202 answer); this package reads what each
// sender's payload names and what that triggers.
//
// The design, and why:
//
//   - Each sender is verified the way it signs or authenticates; for
//     senders that neither sign nor send a header (Docker Hub, Quay) the
//     unguessable path is the only credential.
//   - The payload is a trigger, not a source of truth: it names the
//     repositories (and tags) pushed, and the scan still lists the tags from
//     the registry. A name is matched against ImageRepositories by canonical
//     name (docker.io/library/x == x) through a field index on spec.image,
//     within the webhook's namespace and its selector, so a push to one
//     repository never scans all of them.
//   - A scan is requested with the reconcile-request annotation the
//     ImageRepository reconciler already honours, so the webhook needs no
//     channel into the reconciler, works from any replica (the leader
//     reconciles), and a request is visible and auditable on the object.
//   - A burst (a push of many tags, each blob and manifest its own event)
//     is coalesced per ImageRepository over a short window into one
//     request.
package webhook
