resource "x" {
  # {"$imagepolicy": "apps:numbers"}
  image = "example.com/app:1.0"
