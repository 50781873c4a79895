resource "aws_ecs_task_definition" "app" {
  family = "app"

  # {"$imagepolicy": "apps:numbers"}
  image = "example.com/app:1.10"

  container {
    name  = "sidecar"
    image = "localhost:5000/library/redis:7.2.4@sha256:2d9a00b3981628a533ff43352193b1838b0a4bf6b0033444286f563205e51a2c" // {"$imagepolicy": "apps:redis"}
  }

  dynamic "env" {
    # {"$imagepolicy": "apps:podinfo:tag"}
    tag = "5.0.3"
  }

  # {"$imagepolicy": "apps:numbers"}
  interpolated = "example.com/app:${var.tag}"

  /* {"$imagepolicy": "apps:numbers"} block comments are no markers */
  untouched = "example.com/app:1.0"

  # {"$imagepolicy": "apps:numbers"}
  images = { app = "example.com/app:1.0" }
}
