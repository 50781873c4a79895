region = "eu"
# {"$imagepolicy": "apps:numbers"}
app_image = "example.com/app:1.0"
