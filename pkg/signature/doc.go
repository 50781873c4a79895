// Package signature decides whether an image digest carries a signature
// its policy trusts: cosign (keyed, keyless; Sigstore bundles found as OCI
// referrers and the legacy sha256-<hex>.sig tag) and Notation. It knows
// nothing of controllers: the reflector gates ImagePolicy with it, and
// tk-image's policy eval and explain run the same code.
//
// What is verified is a digest, never a tag: the caller resolves the tag
// once, verifies that digest, and records that digest as what may be
// written. A tag re-pushed after the check is a different digest.
//
// The outcome of one verification is a Verdict: verified (by which key,
// identity or certificate), or not, with a Reason. A Verdict is about
// content-addressed things (the digest and the signatures that name it) and
// a key set (Config.ID), so callers may cache it by both. A failure to ask
// the registry (unreachable, 5xx, a timeout) is an error instead: it says
// nothing about the image and must not be cached.
//
// Everything read from a registry is hostile until verified. Each
// manifest, referrers list and blob is capped (Limits) by the transport
// itself, so a registry that lies about a size is cut off too; at most
// Limits.Referrers signature referrers are examined; referrers are never
// followed recursively, so a referrer naming itself or its subject cannot
// loop. Every malformed or oversized input is a Verdict with a Reason,
// never a panic.
//
// Libraries: sigstore-go verifies Sigstore bundles (keyed and keyless, with
// a trusted root); cosign's own pkg/cosign verifies the legacy .sig tag
// format, whose simple-signing payloads, annotations and claim checks
// cosign defines (re-implementing them would be a second reading of
// cosign's format); notation-go verifies Notation signatures with a trust
// policy and trust store. Registry access is go-containerregistry's, with
// the caps above; notation-go is given a read-only repository over the
// same capped client instead of its own ORAS client.
package signature
