// Package schedule computes update windows: times, read from cron
// expressions in a time zone, that open for a fixed duration. It answers
// whether an instant is inside a window, when the window it is in closes,
// and when the next one opens. It knows nothing of controllers (only
// OfAutomation reads the API type), so the automation controller and
// tk-image explain give the same answers.
//
// Cron expressions are parsed by github.com/robfig/cron/v3, the parser
// Kubernetes CronJobs use, so a schedule reads the same as a CronJob's:
// five fields (minute, hour, day of month, month, day of week; names such
// as MON and JAN; day of month and day of week are either-or when both are
// restricted) or @yearly, @monthly, @weekly, @daily and @hourly.
//
// Daylight saving time follows from reading the expressions in wall-clock
// time: a start that does not exist on the day clocks go forward (02:30 in
// Europe/Berlin on the last Sunday of March) is skipped that day, as
// Kubernetes CronJobs skip it; a start that happens twice on the day clocks
// go back opens a window at both, which can only lengthen it. Durations are
// elapsed time: a 2h window from 01:30 on the day clocks go forward closes
// at 04:30 wall-clock time.
package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"
	// The controller images are distroless, without /usr/share/zoneinfo:
	// the time zone database is compiled in so that IANA names load
	// everywhere this package does.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"
)

// Window is one recurring window as written: when it opens, and for how
// long.
type Window struct {
	Cron     string
	Duration time.Duration
}

// Schedule is a set of windows read in one time zone.
type Schedule struct {
	loc     *time.Location
	windows []window
}

type window struct {
	Window
	spec *cron.SpecSchedule
}

// Span is one opening of a window: from Start (inclusive) to End
// (exclusive).
type Span struct {
	Start, End time.Time
}

// maxMerges bounds how far End looks for windows that overlap or follow
// back to back: a schedule that is open all the time (hourly windows of an
// hour or more) would merge forever.
const maxMerges = 1000

// parser reads standard five-field expressions and the @ descriptors.
var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Parse reads windows in the IANA time zone tz (UTC when empty). Its
// errors name the window (by index) and say what is wrong.
func Parse(tz string, windows []Window) (*Schedule, error) {
	loc, err := LoadLocation(tz)
	if err != nil {
		return nil, err
	}
	if len(windows) == 0 {
		return nil, errors.New("a schedule needs at least one window")
	}
	s := &Schedule{loc: loc}
	for i, w := range windows {
		spec, err := parseCron(w.Cron)
		if err != nil {
			return nil, fmt.Errorf("window %d: cron %q: %w", i, w.Cron, err)
		}
		if w.Duration <= 0 {
			return nil, fmt.Errorf("window %d: duration %s: must be positive", i, w.Duration)
		}
		spec.Location = loc
		s.windows = append(s.windows, window{Window: w, spec: spec})
	}
	return s, nil
}

// LoadLocation loads an IANA time zone name; "" is UTC. "Local" is refused:
// it would be whatever zone the machine reading the schedule has.
func LoadLocation(tz string) (*time.Location, error) {
	if tz == "Local" {
		return nil, errors.New(`time zone "Local" depends on the machine: use an IANA name such as Europe/Berlin, or UTC`)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fmt.Errorf("time zone %q is not an IANA time zone name (such as Europe/Berlin or UTC)", tz)
	}
	return loc, nil
}

func parseCron(expr string) (*cron.SpecSchedule, error) {
	e := strings.TrimSpace(expr)
	switch {
	case strings.HasPrefix(e, "TZ=") || strings.HasPrefix(e, "CRON_TZ="):
		// The schedule's time zone is the only one, so that a window
		// cannot say one zone while the status is computed in another.
		return nil, errors.New("a time zone inside the expression is not supported: set the schedule's time zone")
	case strings.HasPrefix(e, "@every"):
		// @every counts from whenever the controller last started,
		// which is no window a person can plan around.
		return nil, errors.New("@every is not supported: windows open at wall-clock times")
	}
	s, err := parser.Parse(e)
	if err != nil {
		return nil, err
	}
	spec, ok := s.(*cron.SpecSchedule)
	if !ok {
		return nil, errors.New("not a calendar schedule")
	}
	return spec, nil
}

// Location is the time zone the schedule reads its expressions in.
func (s *Schedule) Location() *time.Location { return s.loc }

// Windows returns the windows as written.
func (s *Schedule) Windows() []Window {
	out := make([]Window, len(s.windows))
	for i, w := range s.windows {
		out[i] = w.Window
	}
	return out
}

// At says where t stands: when some window is open at t, open is true and
// the span runs from the start of the earliest opening containing t to the
// moment no window is open any more (overlapping and back-to-back openings
// merged, looking at most maxMerges openings ahead). Otherwise the span is
// the next window to open, merged likewise. ok is false when no window
// opens within five years (such as "0 0 30 2 *").
func (s *Schedule) At(t time.Time) (span Span, open bool, ok bool) {
	start, open := s.openingAt(t)
	if !open {
		start, ok = s.nextStart(t)
		if !ok {
			return Span{}, false, false
		}
	}
	return Span{Start: start, End: s.closeAfter(start)}, open, true
}

// openingAt returns the earliest start of the openings containing t.
func (s *Schedule) openingAt(t time.Time) (time.Time, bool) {
	var earliest time.Time
	for _, w := range s.windows {
		// Next is the first start after its argument: the first start
		// in (t-d, ...]; the opening contains t when it starts by t.
		a := w.spec.Next(t.Add(-w.Duration))
		if !a.IsZero() && !a.After(t) && (earliest.IsZero() || a.Before(earliest)) {
			earliest = a
		}
	}
	return earliest, !earliest.IsZero()
}

// nextStart is the first start of any window after t.
func (s *Schedule) nextStart(t time.Time) (time.Time, bool) {
	var next time.Time
	for _, w := range s.windows {
		a := w.spec.Next(t)
		if !a.IsZero() && (next.IsZero() || a.Before(next)) {
			next = a
		}
	}
	return next, !next.IsZero()
}

// closeAfter returns when the windows open at start all close: it moves
// to the latest end of the openings containing the current instant until
// none contains it.
func (s *Schedule) closeAfter(start time.Time) time.Time {
	cur := start
	for range maxMerges {
		end := cur
		for _, w := range s.windows {
			a := w.spec.Next(cur.Add(-w.Duration))
			if !a.IsZero() && !a.After(cur) {
				if e := a.Add(w.Duration); e.After(end) {
					end = e
				}
			}
		}
		if !end.After(cur) {
			return cur
		}
		cur = end
	}
	return cur
}

// Open reports whether some window is open at t.
func (s *Schedule) Open(t time.Time) bool {
	_, open := s.openingAt(t)
	return open
}

// Describe writes the schedule as a person would read it back, e.g.
// `"0 2 * * 1-5" for 2h in Europe/Berlin`.
func (s *Schedule) Describe() string {
	parts := make([]string, len(s.windows))
	for i, w := range s.windows {
		parts[i] = fmt.Sprintf("%q for %s", w.Cron, FormatDuration(w.Duration))
	}
	return strings.Join(parts, ", ") + " in " + s.loc.String()
}

// FormatDuration writes a duration without the zero units time.Duration
// spells out: 2h rather than 2h0m0s.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
