package controller

// A repository with provider azure and serviceAccountName uses that
// ServiceAccount's cloud identity (--object-level-workload-identity): the
// controller reads it and requests a token for it, nothing more.
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get
// +kubebuilder:rbac:groups="",resources=serviceaccounts/token,verbs=create
