// Package webhook receives registries' push notifications and turns each
// into an immediate scan of exactly the ImageRepositories it is about.
//
// The design, and why:
//
//   - A webhook is an ImageWebhook object, found by its URL path through a
//     field index on status.webhookPath. The path is the sha256 of the
//     Secret's token, the object's name and its namespace, so it cannot be
//     guessed from either alone, as Flux's Receivers do. For senders that
//     neither sign nor send a header (Docker Hub, Quay) the path is the only
//     credential; the others are also verified the way they sign or
//     authenticate, with constant-time comparisons, and refused with 401
//     (no credential) or 403 (a wrong one).
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
//   - The handler only authenticates, parses and queues, then answers 202;
//     senders time out quickly (Docker Hub and GitHub after about 10 s) and
//     retry, so the work must not hold the request. A burst (a push of many
//     tags, each blob and manifest its own event) is coalesced per
//     ImageRepository over a short window into one request; calls beyond a
//     per-webhook rate are refused with 429, and bodies are capped.
package webhook
