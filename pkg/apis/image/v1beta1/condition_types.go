package v1beta1

// Condition reasons of ImageRepository and ImagePolicy, beside the shared
// ones in pkg/runtime/conditions.
const (
	// ImageURLInvalidReason: spec.image is not a repository reference (it
	// has a tag, a digest or a scheme, or does not parse).
	ImageURLInvalidReason = "ImageURLInvalid"
	// InvalidExclusionListReason: an exclusionList entry is not a regexp.
	InvalidExclusionListReason = "InvalidExclusionList"
	// AuthenticationFailedReason: the registry refused the credentials, or
	// they could not be read.
	AuthenticationFailedReason = "AuthenticationFailed"
	// ScanFailedReason: listing the tags failed; it is retried.
	ScanFailedReason = "ScanFailed"
	// InvalidPolicyReason: a semver range or filter regexp does not parse.
	InvalidPolicyReason = "InvalidPolicy"
	// NoMatchingTagReason: no tag passed the filter and the policy.
	NoMatchingTagReason = "NoMatchingTag"
	// DigestLookupFailedReason: the digest of the selected tag could not be
	// read; it is retried.
	DigestLookupFailedReason = "DigestLookupFailed"
)
