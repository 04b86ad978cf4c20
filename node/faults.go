package node

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kpsim/kpsim/reports"
	"github.com/kpsim/kpsim/scenarios"
	"github.com/kpsim/kpsim/sim"
)

// armedFault is one fault of spec.faults or a fault step, armed in this
// node; res indexes n.res.Faults.
type armedFault struct {
	res     int
	api     *sim.APIFault
	command string
}

// faultPrograms are the programs any command fault of the scenario names:
// the proxier wraps them when it starts (nft must be wrapped before the
// proxier looks it up).
func (n *node) faultPrograms() []string {
	if n.oracle {
		return nil
	}
	var out []string
	add := func(f scenarios.Fault) {
		if f.Command != nil && f.AppliesTo(*n.ms) && !slices.Contains(out, f.Command.Name) {
			out = append(out, f.Command.Name)
		}
	}
	for _, f := range n.s.Spec.Faults {
		add(f)
	}
	for _, st := range n.s.Spec.Steps {
		if st.Fault != nil {
			add(*st.Fault)
		}
	}
	return out
}

// startFaults are the command failures of spec.faults, armed before the
// proxier is built.
func (n *node) startFaults() map[string]int {
	if n.oracle {
		return nil
	}
	out := map[string]int{}
	for _, f := range n.s.Spec.Faults {
		if f.Command != nil && f.AppliesTo(*n.ms) {
			out[f.Command.Name] += f.Command.Failures
		}
	}
	return out
}

// armFault arms f, if it is for this node's mode. A command fault of spec.faults (atStart) is armed by
// the proxier's start; here it is only recorded.
func (n *node) armFault(where string, f scenarios.Fault, atStart bool) error {
	if !f.AppliesTo(*n.ms) {
		return nil
	}
	r := reports.FaultResult{Where: where}
	a := armedFault{res: len(n.res.Faults)}
	switch {
	case f.Command != nil:
		r.Kind, r.Target, r.Armed = "command", f.Command.Name, f.Command.Failures
		a.command = f.Command.Name
		if !atStart {
			if n.proxier == nil {
				return fmt.Errorf("%s: kube-proxy is not running", where)
			}
			if err := n.proxier.ArmCommandFault(f.Command.Name, f.Command.Failures); err != nil {
				return err
			}
		}
	case f.API != nil:
		verbs := "every verb"
		if len(f.API.Verbs) > 0 {
			verbs = strings.Join(f.API.Verbs, ",")
		}
		r.Kind, r.Target, r.Armed = "api", fmt.Sprintf("%s (%s)", f.API.Resource, verbs), f.API.Errors
		var err error
		if a.api, err = n.cluster.InjectAPIFault(*f.API); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
	default:
		return fmt.Errorf("%s: a fault needs command or api", where)
	}
	n.res.Faults = append(n.res.Faults, r)
	n.faults = append(n.faults, a)
	return nil
}

// finishFaults records what every armed fault did. Command faults of one
// program share the wrapper's slots, so their injected failures are
// shared out in arming order.
func (n *node) finishFaults(recs []kubeProxyRecord) {
	commands := map[string]int{}
	for _, rec := range recs {
		for name, c := range rec.faults {
			commands[name] += c.Injected
		}
	}
	for _, a := range n.faults {
		r := &n.res.Faults[a.res]
		switch {
		case a.api != nil:
			c := a.api.Count()
			r.Injected, r.Delayed, r.ByVerb = c.Errors, c.Delayed, c.ByVerb
		case a.command != "":
			got := min(commands[a.command], r.Armed)
			r.Injected = got
			commands[a.command] -= got
		}
	}
}
