package orchestrator

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/kpsim/kpsim/node"
	"golang.org/x/term"
)

// Progress: nodes emit node.EventProgress during churn and probe steps,
// and the orchestrator shows it. On a terminal one status line per running
// node is redrawn every second: the step, its elapsed time and a bar of
// the work done. Elsewhere (CI logs) a plain line is printed at most every
// progressLineEvery, so a long phase (a 20-minute IPVS first sync in a VM)
// still shows the run is alive.
const (
	progressLineEvery = 30 * time.Second
	progressBarWidth  = 24
)

// progressView shows one node's progress on w.
type progressView struct {
	w       io.Writer
	tty     bool
	mode    string
	started time.Time

	mu       sync.Mutex
	step     string // "step 2/4 flaps"
	p        *node.ProgressEvent
	lastLine time.Time
	drawn    bool
	stop     chan struct{}
	done     chan struct{}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// newProgressView starts a view; plain forces plain lines even on a
// terminal (two lanes of nodes would redraw over each other).
func newProgressView(w io.Writer, mode string, started time.Time, plain bool) *progressView {
	v := &progressView{w: w, tty: !plain && isTerminal(w), mode: mode, started: started, lastLine: started,
		stop: make(chan struct{}), done: make(chan struct{})}
	go v.loop()
	return v
}

func (v *progressView) loop() {
	defer close(v.done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-v.stop:
			return
		case <-t.C:
			v.mu.Lock()
			switch {
			case v.tty:
				v.draw()
			case time.Since(v.lastLine) >= progressLineEvery:
				fmt.Fprintln(v.w, v.status())
				v.lastLine = time.Now()
			}
			v.mu.Unlock()
		}
	}
}

// line prints a whole line (a step starting, the node done) above the
// status line.
func (v *progressView) line(format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.clear()
	fmt.Fprintf(v.w, format+"\n", args...)
	v.lastLine = time.Now()
	if v.tty {
		v.draw()
	}
}

func (v *progressView) setStep(step string) {
	v.mu.Lock()
	v.step, v.p = step, nil
	v.mu.Unlock()
}

func (v *progressView) setProgress(p node.ProgressEvent) {
	v.mu.Lock()
	v.p = &p
	v.mu.Unlock()
}

// close removes the status line and stops the view.
func (v *progressView) close() {
	close(v.stop)
	<-v.done
	v.mu.Lock()
	v.clear()
	v.mu.Unlock()
}

func (v *progressView) clear() {
	if v.tty && v.drawn {
		fmt.Fprint(v.w, "\r\033[K")
		v.drawn = false
	}
}

func (v *progressView) draw() {
	fmt.Fprint(v.w, "\r\033[K"+v.status())
	v.drawn = true
}

// status is the one-line state: mode, elapsed, step, and the work done.
func (v *progressView) status() string {
	s := fmt.Sprintf("%s: %s", v.mode, time.Since(v.started).Round(time.Second))
	if v.step == "" {
		return s + ": starting"
	}
	s += ": " + v.step
	p := v.p
	if p == nil {
		return s
	}
	frac := -1.0
	switch {
	case p.Of > 0:
		frac = float64(p.Done) / float64(p.Of)
		s += fmt.Sprintf(": %d/%d %s", p.Done, p.Of, p.Unit)
	case p.OfSeconds > 0:
		frac = p.Seconds / p.OfSeconds
		s += fmt.Sprintf(": %d %s, %.0f/%.0fs", p.Done, p.Unit, p.Seconds, p.OfSeconds)
	default:
		s += fmt.Sprintf(": %d %s", p.Done, p.Unit)
	}
	if v.tty && frac >= 0 {
		frac = min(frac, 1)
		full := int(frac * progressBarWidth)
		s += " [" + strings.Repeat("#", full) + strings.Repeat(".", progressBarWidth-full) + "]"
	}
	return s
}
