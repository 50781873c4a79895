package schedule

import (
	"strings"
	"testing"
	"time"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

// At answers, for windows in UTC and in other time zones, across the days
// daylight saving time starts and ends, whether an instant is inside a
// window, when that opening closes, and otherwise when the next one opens
// and closes.
func TestAt(t *testing.T) {
	type w = Window
	tests := []struct {
		name    string
		tz      string
		windows []Window
		at      string
		open    bool
		start   string // of the opening containing at, or of the next one
		end     string
	}{
		{name: "before a daily window", windows: []w{{"0 2 * * *", 2 * time.Hour}},
			at: "2026-11-24T01:59:59Z", start: "2026-11-24T02:00:00Z", end: "2026-11-24T04:00:00Z"},
		{name: "at its start", windows: []w{{"0 2 * * *", 2 * time.Hour}},
			at: "2026-11-24T02:00:00Z", open: true, start: "2026-11-24T02:00:00Z", end: "2026-11-24T04:00:00Z"},
		{name: "just before its end", windows: []w{{"0 2 * * *", 2 * time.Hour}},
			at: "2026-11-24T03:59:59.999Z", open: true, start: "2026-11-24T02:00:00Z", end: "2026-11-24T04:00:00Z"},
		{name: "at its end the next day's is next", windows: []w{{"0 2 * * *", 2 * time.Hour}},
			at: "2026-11-24T04:00:00Z", start: "2026-11-25T02:00:00Z", end: "2026-11-25T04:00:00Z"},
		{name: "descriptor", windows: []w{{"@daily", time.Hour}},
			at: "2026-11-24T12:00:00Z", start: "2026-11-25T00:00:00Z", end: "2026-11-25T01:00:00Z"},

		// Weekday nights in Berlin (CET, UTC+1, in November): Friday's
		// window runs into Saturday; the next opens on Monday.
		{name: "Friday night in Berlin", tz: "Europe/Berlin", windows: []w{{"0 22 * * MON-FRI", 8 * time.Hour}},
			at: "2026-11-27T22:30:00Z", open: true, start: "2026-11-27T21:00:00Z", end: "2026-11-28T05:00:00Z"},
		{name: "Saturday morning in Berlin", tz: "Europe/Berlin", windows: []w{{"0 22 * * MON-FRI", 8 * time.Hour}},
			at: "2026-11-28T05:00:00Z", start: "2026-11-30T21:00:00Z", end: "2026-12-01T05:00:00Z"},
		{name: "New York in winter (EST)", tz: "America/New_York", windows: []w{{"0 9 * * *", time.Hour}},
			at: "2026-01-15T14:30:00Z", open: true, start: "2026-01-15T14:00:00Z", end: "2026-01-15T15:00:00Z"},
		{name: "New York in summer (EDT)", tz: "America/New_York", windows: []w{{"0 9 * * *", time.Hour}},
			at: "2026-07-15T13:30:00Z", open: true, start: "2026-07-15T13:00:00Z", end: "2026-07-15T14:00:00Z"},
		{name: "a half-hour zone", tz: "Asia/Kolkata", windows: []w{{"0 2 * * *", time.Hour}},
			at: "2026-11-24T12:00:00Z", start: "2026-11-24T20:30:00Z", end: "2026-11-24T21:30:00Z"},

		// Clocks go forward in Berlin on 2026-03-29 at 02:00 CET (01:00Z)
		// to 03:00 CEST: 02:30 does not exist that day.
		{name: "a start in the skipped hour is skipped", tz: "Europe/Berlin", windows: []w{{"30 2 * * *", time.Hour}},
			at: "2026-03-29T00:00:00Z", start: "2026-03-30T00:30:00Z", end: "2026-03-30T01:30:00Z"},
		{name: "the day before, it opens in CET", tz: "Europe/Berlin", windows: []w{{"30 2 * * *", time.Hour}},
			at: "2026-03-27T23:00:00Z", start: "2026-03-28T01:30:00Z", end: "2026-03-28T02:30:00Z"},
		{name: "duration is elapsed time across the change", tz: "Europe/Berlin", windows: []w{{"30 1 * * *", 2 * time.Hour}},
			at: "2026-03-29T01:00:00Z", open: true, start: "2026-03-29T00:30:00Z", end: "2026-03-29T02:30:00Z"},
		{name: "hourly windows skip the missing hour", tz: "Europe/Berlin", windows: []w{{"0 * * * *", 30 * time.Minute}},
			at: "2026-03-29T00:45:00Z", start: "2026-03-29T01:00:00Z", end: "2026-03-29T01:30:00Z"},
		// New York springs forward on 2026-03-08 at 02:00 EST (07:00Z).
		{name: "New York's skipped hour", tz: "America/New_York", windows: []w{{"0 2 * * *", time.Hour}},
			at: "2026-03-08T06:00:00Z", start: "2026-03-09T06:00:00Z", end: "2026-03-09T07:00:00Z"},

		// Clocks go back in Berlin on 2026-10-25 at 03:00 CEST (01:00Z)
		// to 02:00 CET: 02:30 happens twice, at 00:30Z and 01:30Z.
		{name: "the first 02:30", tz: "Europe/Berlin", windows: []w{{"30 2 * * *", 30 * time.Minute}},
			at: "2026-10-25T00:00:00Z", start: "2026-10-25T00:30:00Z", end: "2026-10-25T01:00:00Z"},
		{name: "the second 02:30", tz: "Europe/Berlin", windows: []w{{"30 2 * * *", 30 * time.Minute}},
			at: "2026-10-25T01:10:00Z", start: "2026-10-25T01:30:00Z", end: "2026-10-25T02:00:00Z"},
		{name: "both openings of an hour merge", tz: "Europe/Berlin", windows: []w{{"30 2 * * *", time.Hour}},
			at: "2026-10-25T00:45:00Z", open: true, start: "2026-10-25T00:30:00Z", end: "2026-10-25T02:30:00Z"},

		// Several windows: the earliest next one; overlapping and
		// back-to-back openings close together.
		{name: "the earlier of two windows", windows: []w{{"0 22 * * *", time.Hour}, {"0 6 * * *", time.Hour}},
			at: "2026-11-24T12:00:00Z", start: "2026-11-24T22:00:00Z", end: "2026-11-24T23:00:00Z"},
		{name: "overlapping windows merge", windows: []w{{"0 9 * * *", 2 * time.Hour}, {"30 10 * * *", time.Hour}},
			at: "2026-11-24T09:15:00Z", open: true, start: "2026-11-24T09:00:00Z", end: "2026-11-24T11:30:00Z"},
		{name: "back-to-back windows merge", windows: []w{{"0 9 * * *", time.Hour}, {"0 10 * * *", time.Hour}},
			at: "2026-11-24T08:00:00Z", start: "2026-11-24T09:00:00Z", end: "2026-11-24T11:00:00Z"},
		{name: "day of month or day of week", windows: []w{{"0 3 1 * SUN", time.Hour}},
			at: "2026-11-24T12:00:00Z", start: "2026-11-29T03:00:00Z", end: "2026-11-29T04:00:00Z"},
		{name: "every minute for 20 s", windows: []w{{"* * * * *", 20 * time.Second}},
			at: "2026-11-24T12:00:30Z", start: "2026-11-24T12:01:00Z", end: "2026-11-24T12:01:20Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse(tt.tz, tt.windows)
			if err != nil {
				t.Fatal(err)
			}
			span, open, ok := s.At(utc(tt.at))
			if !ok {
				t.Fatal("no window")
			}
			if open != tt.open || !span.Start.Equal(utc(tt.start)) || !span.End.Equal(utc(tt.end)) {
				t.Errorf("At(%s) = %s–%s open %v, want %s–%s open %v", tt.at,
					span.Start.UTC().Format(time.RFC3339), span.End.UTC().Format(time.RFC3339), open, tt.start, tt.end, tt.open)
			}
			if s.Open(utc(tt.at)) != tt.open {
				t.Errorf("Open(%s) = %v, want %v", tt.at, !tt.open, tt.open)
			}
		})
	}
}

// A schedule whose windows follow each other without a gap is always open;
// its close is bounded rather than looked for forever.
func TestAlwaysOpen(t *testing.T) {
	s, err := Parse("", []Window{{"0 * * * *", time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	at := utc("2026-11-24T12:34:56Z")
	span, open, ok := s.At(at)
	if !ok || !open {
		t.Fatalf("At = %v open %v ok %v, want open", span, open, ok)
	}
	if want := at.Add(24 * time.Hour); span.End.Before(want) {
		t.Errorf("closes at %s, want not before %s", span.End, want)
	}
}

// A window that never opens (February 30th) says so instead of naming a
// time.
func TestNeverOpens(t *testing.T) {
	s, err := Parse("", []Window{{"0 0 30 2 *", time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	if _, open, ok := s.At(utc("2026-11-24T00:00:00Z")); ok || open {
		t.Errorf("At: open %v ok %v, want no window", open, ok)
	}
}

// Parse refuses what would not mean a wall-clock window in the schedule's
// time zone, naming the window and the problem.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		name    string
		tz      string
		windows []Window
		want    string
	}{
		{"no windows", "", nil, "at least one window"},
		{"a minute out of range", "", []Window{{"61 * * * *", time.Hour}}, `window 0: cron "61 * * * *"`},
		{"seconds", "", []Window{{"0 0 2 * * *", time.Hour}}, "expected exactly 5 fields"},
		{"too few fields", "", []Window{{"0 2 * *", time.Hour}}, "expected exactly 5 fields"},
		{"garbage", "", []Window{{"tuesdays", time.Hour}}, `cron "tuesdays"`},
		{"@every", "", []Window{{"@every 1h", time.Hour}}, "@every is not supported"},
		{"a zone in the expression", "", []Window{{"CRON_TZ=Asia/Tokyo 0 2 * * *", time.Hour}}, "set the schedule's time zone"},
		{"TZ= too", "", []Window{{"TZ=UTC 0 2 * * *", time.Hour}}, "set the schedule's time zone"},
		{"second window", "", []Window{{"0 2 * * *", time.Hour}, {"0 25 * * *", time.Hour}}, "window 1:"},
		{"no duration", "", []Window{{"0 2 * * *", 0}}, "window 0: duration 0s: must be positive"},
		{"unknown zone", "Mars/Olympus_Mons", []Window{{"0 2 * * *", time.Hour}}, `time zone "Mars/Olympus_Mons" is not an IANA time zone name`},
		{"Local", "Local", []Window{{"0 2 * * *", time.Hour}}, "depends on the machine"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.tz, tt.windows)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// Describe reads back as written, with the zone.
func TestDescribe(t *testing.T) {
	s, err := Parse("Europe/Berlin", []Window{{"0 2 * * 1-5", 2 * time.Hour}, {"@weekly", 90 * time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Describe(), `"0 2 * * 1-5" for 2h, "@weekly" for 1h30m in Europe/Berlin`; got != want {
		t.Errorf("Describe = %s, want %s", got, want)
	}
}
