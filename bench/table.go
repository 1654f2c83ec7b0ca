package main

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A format says how a figure reads.
type format func(v float64) string

var (
	ratio     format = func(v float64) string { return fmt.Sprintf("%.2f×", v) }
	number    format = func(v float64) string { return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64) }
	micros    format = func(v float64) string { return fmt.Sprintf("%.0f µs", v) }
	millis    format = func(v float64) string { return fmt.Sprintf("%.1f ms", v) }
	perSecond format = func(v float64) string { return fmt.Sprintf("%.0f/s", v) }
	percent   format = func(v float64) string { return fmt.Sprintf("%.0f%%", v) }
	seconds   format = func(v float64) string { return fmt.Sprintf("%.2f s", v) }
	bytesOf   format = func(v float64) string {
		if v < 1e6 {
			return fmt.Sprintf("%.0f kB", v/1e3)
		}
		return fmt.Sprintf("%.1f MB", v/1e6)
	}
)

// upTo shows a range of ratios, from the figure to highest.
func upTo(highest float64) format {
	return func(v float64) string { return fmt.Sprintf("%.2f× – %.2f×", v, highest) }
}

// pair shows the figure beside a second one: a median beside a maximum, the server's CPU beside
// the client's.
func pair(second float64) format {
	return func(v float64) string { return fmt.Sprintf("%.0f / %.0f", v, second) }
}

// pairTenths is pair at one decimal: the mean attempts per statement of two kinds.
func pairTenths(second float64) format {
	return func(v float64) string { return fmt.Sprintf("%.1f / %.1f", v, second) }
}

// batchesOf shows a count of batches beside their size.
func batchesOf(size float64) format {
	return func(v float64) string { return fmt.Sprintf("%.0f × %.0f", v, size) }
}

// pairPercent is pair for two shares.
func pairPercent(second float64) format {
	return func(v float64) string { return fmt.Sprintf("%.0f%% / %.0f%%", v, second) }
}

type row struct {
	section, label, target string
	decimals               int // the figure is judged at this many decimals
	cells                  [2]string
	values                 [2]float64
	set                    [2]bool
}

// table collects the figures in the order they are set.
type table struct{ rows []*row }

func (t *table) set(section, label string, col int, v float64, f format, target string) {
	t.setJudged(section, label, col, v, f, target, 2)
}

// setJudged is set for a figure judged at the given decimals.
func (t *table) setJudged(section, label string, col int, v float64, f format, target string, decimals int) {
	var r *row
	for _, x := range t.rows {
		if x.label == label {
			r = x
		}
	}
	if r == nil {
		r = &row{section: section, label: label, target: target, decimals: decimals}
		t.rows = append(t.rows, r)
	}
	r.cells[col], r.values[col], r.set[col] = f(v), v, true
}

// met judges the headline (synchronous commit on) against a target such as "≤ 1.3".
func met(target string, v float64, decimals int) string {
	op, num, ok := strings.Cut(target, " ")
	if !ok {
		return ""
	}
	want, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return ""
	}
	scale := math.Pow(10, float64(decimals))
	v = math.Round(v*scale) / scale
	good := false
	switch op {
	case "≤":
		good = v <= want
	case "≥":
		good = v >= want
	case "=":
		good = v == want
	}
	if good {
		return "met"
	}
	return "**missed**"
}

func (t *table) print(w io.Writer, rounds int, took time.Duration) {
	slices.SortStableFunc(t.rows, func(a, b *row) int { return cmp.Compare(sectionNumber(a.section), sectionNumber(b.section)) })
	fmt.Fprintf(w, "\n| # | figure | sync commit on | sync commit off | target | |\n|---|---|---|---|---|---|\n")
	for _, r := range t.rows {
		cells := r.cells
		for i := range cells {
			if !r.set[i] {
				cells[i] = "—"
			}
		}
		verdict := ""
		if r.target != "" && r.set[0] {
			verdict = met(r.target, r.values[0], r.decimals)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", r.section, r.label, cells[0], cells[1], r.target, verdict)
	}
	fmt.Fprintf(w, "\nWAL syncs are judged at one decimal: pg_stat_wal also counts the WAL writer's background flushes.\n")
	fmt.Fprintf(w, "Each timed figure is the median over %d rounds of per-round ratios, blocks interleaved; took %v.\n", rounds, took.Round(time.Second))
}

// sectionNumber orders the sections as numbers: 10 after 9.
func sectionNumber(section string) int {
	n, err := strconv.Atoi(section)
	if err != nil {
		return math.MaxInt
	}
	return n
}
