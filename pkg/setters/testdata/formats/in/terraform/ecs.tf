resource "aws_ecs_task_definition" "app" {
  family = "app"

  # {"$imagepolicy": "apps:numbers"}
  image = "example.com/app:1.0"

  container {
    name  = "sidecar"
    image = "localhost:5000/library/redis:7.0.0" // {"$imagepolicy": "apps:redis"}
  }

  dynamic "env" {
    # {"$imagepolicy": "apps:podinfo:tag"}
    tag = "5.0.0"
  }

  # {"$imagepolicy": "apps:numbers"}
  interpolated = "example.com/app:${var.tag}"

  /* {"$imagepolicy": "apps:numbers"} block comments are no markers */
  untouched = "example.com/app:1.0"

  # {"$imagepolicy": "apps:numbers"}
  images = { app = "example.com/app:1.0" }
}
