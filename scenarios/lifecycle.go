package scenarios

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Lifecycle steps act on kube-proxy itself rather than on the API: they
// stop it, start it again, change its rules behind its back, clean up
// after it or switch its mode, while the fake pods and the prober go on.

// RestartStep stops kube-proxy and starts a new one in the same node, on
// the same API and the same dataplane, as a crash or a rollout does.
type RestartStep struct {
	// Graceful stops kube-proxy with SIGTERM, as a pod's deletion does
	// (kube-proxy has no handler for it and exits at once, leaving its
	// rules). Default false: SIGKILL of kube-proxy and of any program it
	// is running, as when its container is killed.
	Graceful bool `yaml:"graceful,omitempty" json:"graceful,omitempty"`
	// During "sync" stops kube-proxy in the middle of a sync: once it is
	// running a program that writes rules (iptables-restore, nft, ipset),
	// after a further random delay of up to Within, drawn with the
	// scenario's seed. Default: at once.
	During string `yaml:"during,omitempty" json:"during,omitempty"`
	// Within bounds the random delay of During. Default 20ms.
	Within *Duration `yaml:"within,omitempty" json:"within,omitempty"`
	// Until names a later step: kube-proxy stays down until that step has
	// ended, and the steps up to it (churn and wait only) run while it is
	// down. Default: it starts again at once.
	Until string `yaml:"until,omitempty" json:"until,omitempty"`
	// Down keeps kube-proxy down this much longer (after Until's step,
	// when set). Default 0.
	Down *Duration `yaml:"down,omitempty" json:"down,omitempty"`
	// Timeout bounds the wait for the new kube-proxy to program the API
	// as it is. Default 10m.
	Timeout *Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	// Probes keep sending connections from the stop until the new
	// kube-proxy has programmed everything.
	Probes WatchProbes `yaml:"probes,omitempty" json:"probes"`
}

// During values.
const DuringSync = "sync"

// MigrateStep stops kube-proxy and starts another mode's in the same node
// namespace, as an operator who changes --proxy-mode and restarts it
// does: the new one's startup cleanup meets the old mode's rules.
type MigrateStep struct {
	// Mode is the mode to switch to: iptables, nftables or ipvs. Required.
	Mode string `yaml:"mode" json:"mode"`
	// Backend is the iptables backend of the new mode (iptables and ipvs):
	// legacy or nft. Default: the mode entry's, else legacy.
	Backend string `yaml:"backend,omitempty" json:"backend,omitempty"`
	// Scheduler is the IPVS scheduler when switching to ipvs. Default rr.
	Scheduler string `yaml:"scheduler,omitempty" json:"scheduler,omitempty"`
	// Modes limits the step to these mode entries, by name or by the mode
	// they run at this step. Default: every mode entry.
	Modes []string `yaml:"modes,omitempty" json:"modes,omitempty"`
	// Graceful: as in restart. Default true here: a mode change is a
	// rollout, whose pods are deleted (SIGTERM).
	Graceful *bool `yaml:"graceful,omitempty" json:"graceful,omitempty"`
	// Timeout bounds the wait for the new mode to program the API.
	// Default 10m.
	Timeout *Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	// Probes run across the switch.
	Probes WatchProbes `yaml:"probes,omitempty" json:"probes"`
}

// Tamper actions.
const (
	// TamperFlushChain deletes every rule of one chain (iptables -F, nft
	// flush chain).
	TamperFlushChain = "flushChain"
	// TamperFlushTable empties a table: iptables, every rule and then
	// every chain left (iptables -t TABLE -F; iptables -t TABLE -X, the
	// usual reset, which takes kube-proxy's canary chain too); nftables,
	// every rule of table ip kube-proxy (nft flush table).
	TamperFlushTable = "flushTable"
	// TamperDeleteService removes one Service from kube-proxy's rules:
	// iptables, its KUBE-SERVICES jump and KUBE-SVC chain; nftables, its
	// service-ips map element and chain; IPVS, its virtual server.
	TamperDeleteService = "deleteService"
	// TamperDeleteTable deletes kube-proxy's nftables table (nftables
	// mode only).
	TamperDeleteTable = "deleteTable"
	// TamperFlushIPSet removes every member of one ipset (ipvs mode only).
	TamperFlushIPSet = "flushIPSet"
)

// TamperActions lists the valid tamper actions.
var TamperActions = []string{TamperFlushChain, TamperFlushTable, TamperDeleteService, TamperDeleteTable, TamperFlushIPSet}

// TamperStep changes kube-proxy's rules behind its back, as an operator or
// another agent does, and measures whether and when kube-proxy repairs
// them: until its rules are again what they were before.
type TamperStep struct {
	// Action is flushChain, flushTable, deleteService, deleteTable or
	// flushIPSet. Required.
	Action string `yaml:"action" json:"action"`
	// Table is flushTable's iptables table (iptables and ipvs modes):
	// nat, filter, mangle or raw. Default nat.
	Table string `yaml:"table,omitempty" json:"table,omitempty"`
	// Chain is flushChain's chain. iptables and ipvs modes: TABLE/CHAIN,
	// default nat/KUBE-SERVICES. nftables: a chain of table ip
	// kube-proxy, default services.
	Chain string `yaml:"chain,omitempty" json:"chain,omitempty"`
	// Set is flushIPSet's ipset. Default KUBE-CLUSTER-IP.
	Set string `yaml:"set,omitempty" json:"set,omitempty"`
	// Service is deleteService's Service, as namespace/name. Default: the
	// first Service the probes sample.
	Service string `yaml:"service,omitempty" json:"service,omitempty"`
	// Modes limits the step to these mode entries, by name or mode.
	// Default: every mode entry.
	Modes []string `yaml:"modes,omitempty" json:"modes,omitempty"`
	// Timeout bounds the wait for the repair; a tamper still in place
	// then is reported as not repaired (a finding, not a failure).
	// Default: twice the effective syncPeriod plus 10s.
	Timeout *Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	// Probes run from the tamper until the repair (or the timeout).
	Probes WatchProbes `yaml:"probes,omitempty" json:"probes"`
}

// AppliesTo says whether the tamper is for mode entry m, which runs mode
// at this step (after any migration).
func (t TamperStep) AppliesTo(m ModeSpec) bool { return appliesTo(t.Modes, m) }

// AppliesTo says whether the migration is for mode entry m as it runs at
// this step.
func (mg MigrateStep) AppliesTo(m ModeSpec) bool { return appliesTo(mg.Modes, m) }

func appliesTo(modes []string, m ModeSpec) bool {
	return len(modes) == 0 || slices.Contains(modes, m.Name) || slices.Contains(modes, m.Mode)
}

// CleanupStep stops kube-proxy and runs what `kube-proxy --cleanup` runs,
// then proves nothing of kube-proxy's is left. It must be the last step
// but for waits: the run's end state (the oracle's) is read before it.
type CleanupStep struct {
	// Probes is how many ClusterIP connections, to sampled Services, must
	// fail afterwards.
	Probes WatchProbes `yaml:"probes,omitempty" json:"probes"`
}

// WatchProbes are connections sent continuously while a lifecycle step
// runs: one Service port at a time, in turn, from the client pod to its
// ClusterIP.
type WatchProbes struct {
	// Services is how many Services are sampled (with the scenario's
	// seed). Default 8.
	Services int `yaml:"services,omitempty" json:"services"`
	// Rate is connections per second. Default 50.
	Rate float64 `yaml:"rate,omitempty" json:"rate"`
	// Group limits the sample to one service group.
	Group string `yaml:"group,omitempty" json:"group,omitempty"`
}

// Lifecycle defaults.
const (
	DefaultWatchServices = 8
	DefaultWatchRate     = 50
	DefaultDuringWithin  = 20 * time.Millisecond
	DefaultLifecycleWait = 10 * time.Minute
)

func defaultWatch(w *WatchProbes) {
	if w.Services == 0 {
		w.Services = DefaultWatchServices
	}
	if w.Rate == 0 {
		w.Rate = DefaultWatchRate
	}
}

func defaultLifecycle(st *Step) {
	if r := st.Restart; r != nil {
		if r.Timeout == nil {
			r.Timeout = D(DefaultLifecycleWait)
		}
		if r.During != "" && r.Within == nil {
			r.Within = D(DefaultDuringWithin)
		}
		if r.Down == nil {
			r.Down = D(0)
		}
		defaultWatch(&r.Probes)
	}
	if m := st.Migrate; m != nil {
		if m.Timeout == nil {
			m.Timeout = D(DefaultLifecycleWait)
		}
		if m.Graceful == nil {
			t := true
			m.Graceful = &t
		}
		if m.Mode == ModeIPVS {
			setString(&m.Scheduler, DefaultScheduler)
		}
		defaultWatch(&m.Probes)
	}
	if t := st.Tamper; t != nil {
		switch t.Action {
		case TamperFlushIPSet:
			setString(&t.Set, "KUBE-CLUSTER-IP")
		}
		defaultWatch(&t.Probes)
	}
	if c := st.Cleanup; c != nil {
		defaultWatch(&c.Probes)
	}
}

// ModeAt is the mode entry m as it runs at step i: its mode, backend and
// scheduler changed by every migrate step before i.
func (s *Scenario) ModeAt(m ModeSpec, i int) ModeSpec {
	for _, st := range s.Spec.Steps[:min(i, len(s.Spec.Steps))] {
		if mg := st.Migrate; mg != nil && mg.AppliesTo(m) {
			m = m.migrated(mg)
		}
	}
	return m
}

// FinalMode is mode entry m as it runs after the last step.
func (s *Scenario) FinalMode(m ModeSpec) ModeSpec { return s.ModeAt(m, len(s.Spec.Steps)) }

// migrated is m after a migrate step: the name stays (it names the node's
// results), the mode changes.
func (m ModeSpec) migrated(mg *MigrateStep) ModeSpec {
	backend := mg.Backend
	if backend == "" {
		backend = m.Backend
	}
	m.Mode, m.Backend, m.Scheduler = mg.Mode, backend, mg.Scheduler
	switch m.Mode {
	case ModeNFTables:
		m.Backend, m.Scheduler = "", ""
	case ModeIPTables:
		m.Scheduler = ""
		if m.Backend == "" {
			m.Backend = BackendLegacy
		}
	case ModeIPVS:
		if m.Backend == "" {
			m.Backend = BackendLegacy
		}
	}
	return m
}

// lifecycle validates the lifecycle steps and the steps that run while
// kube-proxy is down.
func (v *validator) lifecycle(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	steps := v.s.Spec.Steps
	index := map[string]int{}
	for i, st := range steps {
		index[st.Name] = i
	}
	downUntil, downFrom := -1, -1
	for i, st := range steps {
		sp := p.Index(i)
		if i <= downUntil {
			if st.Churn == nil && st.Wait == nil {
				errs = append(errs, field.Forbidden(sp, fmt.Sprintf("kube-proxy is down here (%s stops it until step %q): only churn and wait steps can run while it is down; the restart's own probes cover the down time",
					p.Index(downFrom).Child("restart"), steps[downUntil].Name)))
			}
		}
		if r := st.Restart; r != nil {
			rp := sp.Child("restart")
			if r.During != "" && r.During != DuringSync {
				errs = append(errs, field.NotSupported(rp.Child("during"), r.During, []string{DuringSync}))
			}
			if r.Within != nil && r.During == "" {
				errs = append(errs, field.Invalid(rp.Child("within"), r.Within.String(), "applies to during: sync only"))
			} else if r.Within != nil && r.Within.Duration < 0 {
				errs = append(errs, field.Invalid(rp.Child("within"), r.Within.String(), "must not be negative"))
			}
			if r.Down.Duration < 0 {
				errs = append(errs, field.Invalid(rp.Child("down"), r.Down.String(), "must not be negative"))
			}
			if r.Timeout.Duration <= 0 {
				errs = append(errs, field.Invalid(rp.Child("timeout"), r.Timeout.String(), "must be positive"))
			}
			if r.Until != "" {
				j, ok := index[r.Until]
				switch {
				case !ok:
					errs = append(errs, field.NotFound(rp.Child("until"), r.Until))
				case j <= i:
					errs = append(errs, field.Invalid(rp.Child("until"), r.Until, "must name a later step"))
				default:
					downUntil, downFrom = j, i
				}
			}
			errs = append(errs, v.watch(rp.Child("probes"), r.Probes)...)
		}
		if m := st.Migrate; m != nil {
			mp := sp.Child("migrate")
			modes := []string{ModeIPTables, ModeNFTables, ModeIPVS}
			if !slices.Contains(modes, m.Mode) {
				errs = append(errs, field.NotSupported(mp.Child("mode"), m.Mode, modes))
			}
			if m.Backend != "" && m.Mode == ModeNFTables {
				errs = append(errs, field.Invalid(mp.Child("backend"), m.Backend, "nftables mode runs no iptables backend"))
			} else if m.Backend != "" && m.Backend != BackendLegacy && m.Backend != BackendNFT {
				errs = append(errs, field.NotSupported(mp.Child("backend"), m.Backend, []string{BackendLegacy, BackendNFT}))
			}
			if m.Scheduler != "" && m.Mode != ModeIPVS {
				errs = append(errs, field.Invalid(mp.Child("scheduler"), m.Scheduler, "applies to ipvs mode only"))
			}
			if m.Timeout.Duration <= 0 {
				errs = append(errs, field.Invalid(mp.Child("timeout"), m.Timeout.String(), "must be positive"))
			}
			for _, name := range m.Modes {
				if !slices.ContainsFunc(v.s.Spec.Modes, func(ms ModeSpec) bool { return ms.Name == name || v.s.ModeAt(ms, i).Mode == name }) {
					errs = append(errs, field.NotFound(mp.Child("modes"), name))
				}
			}
			for _, ms := range v.s.Spec.Modes {
				before := v.s.ModeAt(ms, i)
				if !m.AppliesTo(before) {
					continue
				}
				if after := before.migrated(m); after.Mode == before.Mode && after.Backend == before.Backend {
					errs = append(errs, field.Invalid(mp.Child("mode"), m.Mode, fmt.Sprintf("mode entry %s already runs %s here: a migration must change the mode or the backend (limit the step with migrate.modes)", ms.Name, describeMode(before))))
				}
			}
			errs = append(errs, v.watch(mp.Child("probes"), m.Probes)...)
		}
		if t := st.Tamper; t != nil {
			tp := sp.Child("tamper")
			if !slices.Contains(TamperActions, t.Action) {
				errs = append(errs, field.NotSupported(tp.Child("action"), t.Action, TamperActions))
			}
			for _, name := range t.Modes {
				if !slices.ContainsFunc(v.s.Spec.Modes, func(m ModeSpec) bool { return m.Name == name || m.Mode == name }) {
					errs = append(errs, field.NotFound(tp.Child("modes"), name))
				}
			}
			for _, ms := range v.s.Spec.Modes {
				if at := v.s.ModeAt(ms, i); t.AppliesTo(at) {
					errs = append(errs, tamperFits(tp, t, at)...)
				}
			}
			if t.Table != "" && t.Action != TamperFlushTable {
				errs = append(errs, field.Invalid(tp.Child("table"), t.Table, "applies to flushTable only"))
			} else if t.Table != "" && !slices.Contains([]string{"nat", "filter", "mangle", "raw"}, t.Table) {
				errs = append(errs, field.NotSupported(tp.Child("table"), t.Table, []string{"nat", "filter", "mangle", "raw"}))
			}
			if t.Chain != "" && t.Action != TamperFlushChain {
				errs = append(errs, field.Invalid(tp.Child("chain"), t.Chain, "applies to flushChain only"))
			}
			if t.Set != "" && t.Action != TamperFlushIPSet {
				errs = append(errs, field.Invalid(tp.Child("set"), t.Set, "applies to flushIPSet only"))
			}
			if t.Service != "" {
				if t.Action != TamperDeleteService {
					errs = append(errs, field.Invalid(tp.Child("service"), t.Service, "applies to deleteService only"))
				} else if ns, name, ok := strings.Cut(t.Service, "/"); !ok || ns == "" || name == "" {
					errs = append(errs, field.Invalid(tp.Child("service"), t.Service, "want namespace/name"))
				}
			}
			if t.Timeout != nil && t.Timeout.Duration <= 0 {
				errs = append(errs, field.Invalid(tp.Child("timeout"), t.Timeout.String(), "must be positive"))
			}
			errs = append(errs, v.watch(tp.Child("probes"), t.Probes)...)
		}
		if c := st.Cleanup; c != nil {
			for j := i + 1; j < len(steps); j++ {
				if steps[j].Wait == nil {
					errs = append(errs, field.Forbidden(sp.Child("cleanup"), fmt.Sprintf("must be the last step but for waits (step %q follows): kube-proxy and its rules are gone after it", steps[j].Name)))
					break
				}
			}
			if downUntil >= i {
				errs = append(errs, field.Forbidden(sp.Child("cleanup"), "kube-proxy is down here"))
			}
			errs = append(errs, v.watch(sp.Child("cleanup", "probes"), c.Probes)...)
		}
	}
	return errs
}

// tamperFits checks that action t exists in the mode it meets.
func tamperFits(p *field.Path, t *TamperStep, at ModeSpec) field.ErrorList {
	var errs field.ErrorList
	only := func(mode string) {
		if at.Mode != mode {
			errs = append(errs, field.Invalid(p.Child("action"), t.Action, fmt.Sprintf("%s mode only; mode entry %s runs %s here (limit the step with tamper.modes)", mode, at.Name, describeMode(at))))
		}
	}
	switch t.Action {
	case TamperDeleteTable:
		only(ModeNFTables)
	case TamperFlushIPSet:
		only(ModeIPVS)
	case TamperFlushTable:
		if t.Table != "" && at.Mode == ModeNFTables {
			errs = append(errs, field.Invalid(p.Child("table"), t.Table, fmt.Sprintf("mode entry %s runs nftables here: flushTable empties table ip kube-proxy, leave table unset", at.Name)))
		}
	case TamperFlushChain:
		if t.Chain == "" {
			break
		}
		table, chain, ok := strings.Cut(t.Chain, "/")
		switch {
		case at.Mode == ModeNFTables && ok:
			errs = append(errs, field.Invalid(p.Child("chain"), t.Chain, fmt.Sprintf("mode entry %s runs nftables here: name a chain of table ip kube-proxy, without a table", at.Name)))
		case at.Mode != ModeNFTables && (!ok || chain == "" || !slices.Contains([]string{"nat", "filter", "mangle", "raw"}, table)):
			errs = append(errs, field.Invalid(p.Child("chain"), t.Chain, fmt.Sprintf("mode entry %s runs %s here: want TABLE/CHAIN, TABLE one of nat, filter, mangle, raw", at.Name, describeMode(at))))
		}
	}
	return errs
}

func describeMode(m ModeSpec) string {
	if m.Backend != "" {
		return m.Mode + " (" + m.Backend + " backend)"
	}
	return m.Mode
}

func (v *validator) watch(p *field.Path, w WatchProbes) field.ErrorList {
	var errs field.ErrorList
	if w.Services < 0 {
		errs = append(errs, field.Invalid(p.Child("services"), w.Services, "must be positive"))
	}
	if w.Rate < 0 || math.IsNaN(w.Rate) || math.IsInf(w.Rate, 0) || w.Rate > 1000 {
		errs = append(errs, field.Invalid(p.Child("rate"), w.Rate, "must be a number of connections per second in (0, 1000]"))
	}
	if w.Group != "" && v.group(w.Group) == nil {
		errs = append(errs, field.NotFound(p.Child("group"), w.Group))
	}
	return errs
}
