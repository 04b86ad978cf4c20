package node

import (
	"fmt"
	"time"

	"github.com/kpsim/kpsim/reports"
)

// The messages between the orchestrator and a node process: the one input
// the node reads, the events it emits while it runs and the result it
// ends with. Both ends use these types; Version lets either refuse a peer
// built from another kpsim (a variant binary) instead of misreading it.

// ProtocolVersion names the message format below.
const ProtocolVersion = "kpsim.dev/node/v1alpha2"

// MainName is the node main this package registers (netns.RegisterNodeMain).
const MainName = "kpsim-mode"

// Input is what the orchestrator sends a node process, once.
type Input struct {
	Version string `json:"version"`
	// ScenarioFile and ScenarioYAML are the scenario as the orchestrator
	// read it; the node loads the same bytes again.
	ScenarioFile string `json:"scenarioFile"`
	ScenarioYAML []byte `json:"scenarioYAML"`
	// Mode is the scenario's mode entry name.
	Mode string `json:"mode"`
	// OutDir is the run directory, for dumps.
	OutDir string `json:"outDir"`
	// InVM says the node runs in a VM, possibly emulated: probes wait
	// longer for answers.
	InVM bool `json:"inVM,omitempty"`
	// Calibrate, when set, makes this node only measure unit costs with
	// this iptables backend and return them (the host side of a VM
	// mode's native estimate).
	Calibrate string `json:"calibrate,omitempty"`
	// OracleState, when set, makes this node the after-churn oracle: a
	// fresh proxier built from this API state (saved by the run's node).
	OracleState []byte `json:"oracleState,omitempty"`
	// Repeat, when set, makes this node time one more first sync of the
	// mode entry: a fresh proxier at the scenario's initial API state,
	// after a calibration and without fake pods or steps (kpsim run
	// --twin-repeats).
	Repeat bool `json:"repeat,omitempty"`
	// EventLag, for tests, holds each Service and EndpointSlice watch
	// event this long in kube-proxy's process before its informer takes
	// it, as a loaded machine does (remoteapi.Deliveries.Lag).
	EventLag time.Duration `json:"eventLag,omitempty"`
}

// Events a node emits (netns.NodeEnv.Emit), by kind.
const (
	// EventStep: a step begins (StepEvent).
	EventStep = "step"
	// EventProgress: work done in a churn or probe step (ProgressEvent), at
	// most every progressEvery.
	EventProgress = "progress"
)

// StepEvent is an EventStep's payload.
type StepEvent struct {
	Mode  string `json:"mode"`
	Step  string `json:"step"`
	Index int    `json:"index"`
	Of    int    `json:"of"`
}

// ProgressEvent is an EventProgress's payload: Done of Of units of work
// (mutations or connections; Of 0 when only a duration is known) and, for
// a churn step with a duration, the elapsed and planned seconds.
type ProgressEvent struct {
	Step      string  `json:"step"`
	Unit      string  `json:"unit"`
	Done      int     `json:"done"`
	Of        int     `json:"of,omitempty"`
	Seconds   float64 `json:"seconds,omitempty"`
	OfSeconds float64 `json:"ofSeconds,omitempty"`
}

// Result is what a node process ends with: a mode's measurements, or a
// calibration node's unit costs.
type Result struct {
	Version     string               `json:"version"`
	Mode        *reports.ModeResult  `json:"mode,omitempty"`
	Calibration *reports.Calibration `json:"calibration,omitempty"`
}

// CheckVersion refuses a message of another protocol version.
func CheckVersion(what, got string) error {
	if got != ProtocolVersion {
		return fmt.Errorf("%s is protocol %q, this kpsim speaks %q: the node and the orchestrator must come from the same kpsim build", what, got, ProtocolVersion)
	}
	return nil
}
