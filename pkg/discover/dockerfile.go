package discover

import (
	"strings"

	"toolkit.dev/image-toolkit/pkg/apis/meta"
	"toolkit.dev/image-toolkit/pkg/setters"
)

// dockerfile reads a Dockerfile's images: FROM's and COPY --from's, where
// docker build pulls them (setters.DockerfileImages, with BuildKit's
// parser). A reference made of build arguments is skipped: what it names is
// known only when the image is built.
func (d *discoverer) dockerfile(file string, data []byte) {
	images, err := setters.DockerfileImages(data)
	if err != nil {
		d.skip(Skipped{File: file, Reason: ReasonDockerfile + ": " + firstLine(err.Error())})
		return
	}
	for _, img := range images {
		if strings.Contains(img.Value, "$") {
			d.skip(Skipped{File: file, Line: img.Line, Value: img.Value, Reason: ReasonBuildArg})
			continue
		}
		path := img.Instruction
		if img.Instruction == "COPY" {
			path = "COPY --from"
		}
		d.reference(Location{File: file, Line: img.Line, Column: img.Column, Path: path, Value: img.Value,
			Object: meta.ObjectID{Kind: setters.DockerfileFormat.Kind}})
	}
}

// values reads the images of an HCL, TOML, .env or JSON file: the plain
// strings of keys that name an image (image, container_image, APP_IMAGE),
// which Terraform's ECS and Cloud Run resources, fly.toml, compose's .env
// files and ECS task definitions use; a JSON value is where its pointer
// says. Other strings are not read as images: in these formats
// nothing but the key tells an image from any other string.
func (d *discoverer) values(file string, f *setters.Format, data []byte) {
	vals, err := f.Values(data)
	if err != nil {
		d.skip(Skipped{File: file, Reason: ReasonFormat + ": " + firstLine(err.Error())})
		return
	}
	for _, v := range vals {
		if !setters.ImageKey(v.Key) {
			continue
		}
		value := string(data[v.Start:v.End])
		where := v.Key
		if v.Path != "" {
			where = v.Path
		}
		d.reference(Location{File: file, Line: v.Line, Column: v.Column, Path: where, Value: value, Object: meta.ObjectID{Kind: f.Kind}})
	}
}
