# {"$imagepolicy": "apps:podinfo"}
FROM ghcr.io/stefanprodan/podinfo:5.0.3
