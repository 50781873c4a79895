package hold

import "testing"

const bot = "imagebot@example.com"

func TestHeld(t *testing.T) {
	auto := Line{Commit: "a1", Email: "ImageBot@example.com "}
	person := Line{Commit: "p1", Email: "jane@example.com"}
	for _, c := range []struct {
		name string
		seen Seen
		want bool
	}{
		{"a person rolled back the automation's value", Seen{Automation: bot, Last: person, Previous: "1.2.0", HasPrevious: true, Before: auto, Value: "1.1.0"}, true},
		{"a person pinned a newer value over the automation's", Seen{Automation: bot, Last: person, Previous: "1.2.0", HasPrevious: true, Before: auto, Value: "1.3.0-rc.1"}, true},
		{"the automation wrote the value itself", Seen{Automation: bot, Last: auto, Previous: "1.1.0", HasPrevious: true, Before: person, Value: "1.2.0"}, false},
		{"a person edited a person's value (the first manifests)", Seen{Automation: bot, Last: person, Previous: "1.0.0", HasPrevious: true, Before: person, Value: "1.1.0"}, false},
		{"the marker is new in the person's commit", Seen{Automation: bot, Last: person, Value: "1.1.0"}, false},
		{"the person's commit touched the line, not the value", Seen{Automation: bot, Last: person, Previous: "1.1.0", HasPrevious: true, Before: auto, Value: "1.1.0"}, false},
		{"no automation email: nothing is the automation's", Seen{Last: person, Previous: "1.2.0", HasPrevious: true, Before: auto, Value: "1.1.0"}, false},
	} {
		if got := Held(c.seen); got != c.want {
			t.Errorf("%s: held %t, want %t", c.name, got, c.want)
		}
	}
}
