package dashboard

import (
	"slices"
	"time"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
)

// HistoryRow is one push of an automation's status.history.
type HistoryRow struct {
	Time        time.Time
	Commit      string
	CommitURL   string
	PullRequest int
	Images      []imagev1.PushedImage
	MoreImages  int
}

// VersionChart lays out an automation's history as a chart drawn on the
// server (inline SVG, so it needs no script and no library): one lane per
// policy, a point per commit that changed it, at the commit's time and
// labelled with the tag written. The history table beside it says the same
// in words, for screen readers and for copying.
type VersionChart struct {
	Width, Height int
	// PlotLeft and PlotRight bound the time axis in the SVG's units.
	PlotLeft, PlotRight int
	From, To            time.Time
	Lanes               []ChartLane
	// MoreLanes counts the policies beyond maxLanes, not drawn.
	MoreLanes int
}

// ChartLane is one policy's versions over time.
type ChartLane struct {
	Policy string
	// Name is Policy cut to fit beside the lane; the title has it whole.
	Name   string
	Y      int
	Points []ChartPoint
}

// ChartPoint is one commit's version of a policy.
type ChartPoint struct {
	X         int
	Tag, From string
	Time      time.Time
	Commit    string
	// Label is false where the previous label is too close to fit this
	// one; the point's title still names it.
	Label bool
}

const (
	chartWidth     = 720
	chartPlotLeft  = 200
	chartPlotRight = 650
	chartLane      = 44
	chartTop       = 36
	chartAxis      = 24
	// minSpan is the shortest time the axis spans, so that a first push
	// sits at the right, after an hour of nothing, not alone mid-axis.
	minSpan  = time.Hour
	maxLanes = 12
	// labelGap is the room a tag label needs before the next one.
	labelGap = 64
)

// historyOf lists the automation's pushes, newest first, with links.
func historyOf(a *imagev1.ImageUpdateAutomation, address string) []HistoryRow {
	rows := make([]HistoryRow, 0, len(a.Status.History))
	for _, h := range a.Status.History {
		row := HistoryRow{Time: h.Time.Time, Commit: h.Commit, PullRequest: h.PullRequest, Images: h.Images, MoreImages: h.MoreImages}
		if h.Commit != "" {
			row.CommitURL = CommitURL(address, h.Commit)
		}
		rows = append(rows, row)
	}
	return rows
}

// versionChart draws history (newest first, as the status keeps it) up to
// now; nil when there is nothing to draw.
func versionChart(history []HistoryRow, now time.Time) *VersionChart {
	if len(history) == 0 {
		return nil
	}
	c := &VersionChart{Width: chartWidth, PlotLeft: chartPlotLeft, PlotRight: chartPlotRight,
		From: history[len(history)-1].Time, To: now}
	if c.To.Before(history[0].Time) {
		c.To = history[0].Time
	}
	if c.To.Sub(c.From) < minSpan {
		c.From = c.To.Add(-minSpan)
	}
	lanes := map[string]*ChartLane{}
	var order []string
	// Oldest first, so each lane's points run left to right.
	for i := len(history) - 1; i >= 0; i-- {
		h := history[i]
		for _, img := range h.Images {
			l, ok := lanes[img.Policy]
			if !ok {
				l = &ChartLane{Policy: img.Policy, Name: cut(img.Policy, 24)}
				lanes[img.Policy] = l
				order = append(order, img.Policy)
			}
			l.Points = append(l.Points, ChartPoint{X: c.x(h.Time), Tag: img.Tag, From: img.From, Time: h.Time, Commit: h.Commit})
		}
	}
	if len(order) == 0 {
		return nil
	}
	slices.Sort(order)
	if len(order) > maxLanes {
		c.MoreLanes = len(order) - maxLanes
		order = order[:maxLanes]
	}
	for i, p := range order {
		l := lanes[p]
		l.Y = chartTop + i*chartLane
		last := -labelGap
		for k := range l.Points {
			if l.Points[k].X-last >= labelGap {
				l.Points[k].Label = true
				last = l.Points[k].X
			}
		}
		c.Lanes = append(c.Lanes, *l)
	}
	c.Height = chartTop + (len(c.Lanes)-1)*chartLane + chartAxis + 24
	return c
}

// AxisY is where the time axis runs, under the lanes.
func (c *VersionChart) AxisY() int { return c.Height - 24 }

// cut shortens s to n runes with an ellipsis.
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// x places t on the time axis; a history of one instant sits at its
// middle.
func (c *VersionChart) x(t time.Time) int {
	span := c.To.Sub(c.From)
	if span <= 0 {
		return (c.PlotLeft + c.PlotRight) / 2
	}
	return c.PlotLeft + int(float64(c.PlotRight-c.PlotLeft)*float64(t.Sub(c.From))/float64(span))
}
