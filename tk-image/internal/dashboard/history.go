package dashboard

import (
	"slices"
	"time"

	imagev1 "toolkit.dev/image-toolkit/pkg/apis/image/v1beta1"
	"toolkit.dev/image-toolkit/pkg/forge"
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
// policy, a point per commit that changed it, labelled with the tag
// written. Commits are placed in order, evenly (the newest at the right
// end), not by their time: a history of one old push and ten recent ones
// would otherwise bunch ten points at the right edge. Each point's title
// and the history table beside it give the times, in words, for screen
// readers and for copying.
type VersionChart struct {
	Width, Height int
	// PlotLeft and PlotRight bound the commits' axis in the SVG's units.
	PlotLeft, PlotRight int
	// From and To are the oldest and newest commits' times.
	From, To time.Time
	Lanes    []ChartLane
	// MoreLanes counts the policies beyond maxLanes, not drawn.
	MoreLanes int
}

// ChartLane is one policy's versions over time.
type ChartLane struct {
	Policy string
	// Name is Policy cut to fit above the lane; the title has it whole.
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
	// Label is false where a newer point's label leaves no room for this
	// one; the point's title still names it.
	Label bool
}

const (
	chartWidth     = 720
	chartPlotLeft  = 40
	chartPlotRight = 680
	// chartLane is a lane's height: its name above the line, the tags
	// below the points.
	chartLane = 56
	chartTop  = 30
	chartAxis = 24
	// maxStep is the widest gap between two commits, so that a short
	// history sits at the right, newest last, not spread over the axis.
	maxStep  = 80
	maxLanes = 12
	// labelGap is the room a tag label needs beside the next one.
	labelGap = 64
)

// historyOf lists the automation's pushes, newest first, with links.
func historyOf(a *imagev1.ImageUpdateAutomation, address string) []HistoryRow {
	rows := make([]HistoryRow, 0, len(a.Status.History))
	for _, h := range a.Status.History {
		row := HistoryRow{Time: h.Time.Time, Commit: h.Commit, PullRequest: h.PullRequest, Images: h.Images, MoreImages: h.MoreImages}
		if h.Commit != "" {
			row.CommitURL = forge.CommitURL(address, forgeOf(a), h.Commit)
		}
		rows = append(rows, row)
	}
	return rows
}

// versionChart draws history (newest first, as the status keeps it); nil
// when there is nothing to draw.
func versionChart(history []HistoryRow) *VersionChart {
	if len(history) == 0 {
		return nil
	}
	n := len(history)
	step := maxStep
	if n > 1 {
		step = min(maxStep, (chartPlotRight-chartPlotLeft)/(n-1))
	}
	c := &VersionChart{Width: chartWidth, PlotLeft: chartPlotRight - (n-1)*step, PlotRight: chartPlotRight,
		From: history[n-1].Time, To: history[0].Time}
	lanes := map[string]*ChartLane{}
	var order []string
	// Oldest first, so each lane's points run left to right.
	for i := n - 1; i >= 0; i-- {
		h := history[i]
		for _, img := range h.Images {
			l, ok := lanes[img.Policy]
			if !ok {
				l = &ChartLane{Policy: img.Policy, Name: cut(img.Policy, 60)}
				lanes[img.Policy] = l
				order = append(order, img.Policy)
			}
			l.Points = append(l.Points, ChartPoint{X: chartPlotRight - i*step, Tag: img.Tag, From: img.From, Time: h.Time, Commit: h.Commit})
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
		// The newest point is labelled first, then older ones where
		// there is room: what a lane runs now is always named.
		last := chartWidth + labelGap
		for k := len(l.Points) - 1; k >= 0; k-- {
			if last-l.Points[k].X >= labelGap {
				l.Points[k].Label = true
				last = l.Points[k].X
			}
		}
		c.Lanes = append(c.Lanes, *l)
	}
	c.Height = chartTop + (len(c.Lanes)-1)*chartLane + chartAxis + 30
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
