package schedule

import (
	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
)

// OfAutomation reads an ImageUpdateAutomation's spec.schedule; nil without
// one (the automation may make a job at any time).
func OfAutomation(spec *imagev1.UpdateSchedule) (*Schedule, error) {
	if spec == nil {
		return nil, nil
	}
	ws := make([]Window, len(spec.Windows))
	for i, w := range spec.Windows {
		ws[i] = Window{Cron: w.Cron, Duration: w.Duration.Duration}
	}
	return Parse(spec.TimeZone, ws)
}
