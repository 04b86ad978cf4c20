package orchestrator

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/kpsim/kpsim/reports"
	"github.com/kpsim/kpsim/scenarios"
)

// runSweep runs every mode entry at every size of the scenario's sweep,
// smallest size first (so an interrupted sweep still has every mode's
// small sizes), each run in a fresh node given the scenario document with
// the group resized (scenarios.SweepPoint). Each size has its own
// subdirectory <group>-<count> of the run directory for node logs, dumps
// and the document the nodes ran.
//
// It returns one ModeResult per mode entry and size, entry by entry,
// named <entry>@<count>. A size above the entry's spec.sweep.maxCount, or
// above a size the entry failed at (a larger one would fail too, only
// slower), is a result with Skipped set that says why.
func (r *run) sweep() []reports.ModeResult {
	ctx, stderr, modes := r.ctx, r.stderr, r.modes
	sw := r.main.s.Spec.Sweep
	byEntry := map[string][]reports.ModeResult{}
	failedAt := map[string]int{}
	for ci, count := range sw.Counts {
		if ctx.Err() != nil {
			break
		}
		sub := fmt.Sprintf("%s-%d", sw.Group, count)
		info := reports.SweepRun{Group: sw.Group, Count: count, Dir: sub}
		var run []scenarios.ModeSpec
		for _, m := range modes {
			info.Entry = m.Name
			why := sweepSkip(sw, m, count, failedAt[m.Name])
			if why == "" {
				run = append(run, m)
				continue
			}
			i := info
			byEntry[m.Name] = append(byEntry[m.Name], reports.ModeResult{Name: sweepRunName(m.Name, count), Mode: m.Mode, Backend: m.Backend, Skipped: why, Sweep: &i})
		}
		if len(run) == 0 {
			continue
		}
		pointDir := filepath.Join(r.main.dir, sub)
		pdata, ps, err := scenarios.SweepPoint(r.main.file, r.main.data, count)
		if err == nil {
			err = os.MkdirAll(pointDir, 0o755)
		}
		if err == nil {
			// The document the nodes of this size ran, for the record.
			err = os.WriteFile(filepath.Join(pointDir, "scenario.yaml"), pdata, 0o644)
		}
		if err == nil {
			c := ps.Counts()
			info.Services, info.Endpoints = c.Start.Services, int(c.Start.Endpoints)
		}
		for _, m := range run {
			info.Entry = m.Name
			i := info
			var mr reports.ModeResult
			if err != nil {
				mr = reports.ModeResult{Name: m.Name, Mode: m.Mode, Backend: m.Backend, Error: fmt.Sprintf("sweep count %d: %v", count, err)}
			} else {
				fmt.Fprintf(stderr, "sweep %s=%d (%d/%d): %s: %d Services, %d endpoints\n", sw.Group, count, ci+1, len(sw.Counts), m.Name, info.Services, info.Endpoints)
				mr = r.runMode(point{s: ps, file: r.main.file, data: pdata, dir: pointDir}, m)
			}
			mr.Name, mr.Sweep = sweepRunName(m.Name, count), &i
			relocate(&mr, sub)
			if mr.Error != "" {
				failedAt[m.Name] = count
			}
			byEntry[m.Name] = append(byEntry[m.Name], mr)
			if ctx.Err() != nil {
				break
			}
		}
	}
	var out []reports.ModeResult
	for _, m := range modes {
		out = append(out, byEntry[m.Name]...)
	}
	return out
}

// sweepRunName names one size of a mode entry in results.
func sweepRunName(entry string, count int) string { return fmt.Sprintf("%s@%d", entry, count) }

// sweepSkip says why mode entry m does not run size count, or "".
func sweepSkip(sw *scenarios.Sweep, m scenarios.ModeSpec, count, failedAt int) string {
	if limit, key, ok := sw.Cap(m); ok && count > limit {
		return fmt.Sprintf("above spec.sweep.maxCount[%s] = %d", key, limit)
	}
	if failedAt > 0 {
		return fmt.Sprintf("the run at %d failed", failedAt)
	}
	return ""
}

// relocate makes a run's file names relative to the run directory.
func relocate(mr *reports.ModeResult, sub string) {
	for i, d := range mr.Dumps {
		mr.Dumps[i] = filepath.Join(sub, d)
	}
	if mr.Oracle != nil {
		for i, f := range mr.Oracle.Files {
			if !filepath.IsAbs(f) {
				mr.Oracle.Files[i] = filepath.Join(sub, f)
			}
		}
	}
}

// sweepSummary is the result's cost-versus-size view (nil without a
// sweep), built once the runs are in: VM runs then have their native
// estimates.
func sweepSummary(s *scenarios.Scenario, modes []scenarios.ModeSpec, res *reports.Result) *reports.SweepResult {
	sw := s.Spec.Sweep
	if sw == nil {
		return nil
	}
	caps := map[string]int{}
	for _, m := range modes {
		if limit, _, ok := sw.Cap(m); ok {
			caps[m.Name] = limit
		}
	}
	return reports.NewSweepResult(sw.Group, slices.Clone(sw.Counts), res.Modes, caps)
}
