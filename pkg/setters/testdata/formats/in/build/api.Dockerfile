# {"$imagepolicy": "apps:podinfo"}
FROM podinfo:5.0.0
