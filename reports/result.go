package reports

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"time"
)

// SchemaVersion names the result format. Readers refuse other versions, so
// the format can change under a new name without old files being misread.
// v1alpha2: Resources are kube-proxy's process only, the harness's apart.
const SchemaVersion = "kpsim.dev/result/v1alpha2"

// schemaV1alpha1 is still read: it differs only in what Resources covered
// (the node process with the responders and the prober in it).
const schemaV1alpha1 = "kpsim.dev/result/v1alpha1"

// Result is everything one `kpsim run` measured: one entry per mode, the
// environment it ran in, the host check and the expectations verdict. It
// is written as result.json and is the only input of reports.
type Result struct {
	SchemaVersion string `json:"schemaVersion"`
	// RunID names the run; its directory is results/<RunID> by default.
	RunID string `json:"runID"`
	// Scenario identifies what ran.
	Scenario ScenarioInfo `json:"scenario"`
	// Environment is where it ran.
	Environment Environment `json:"environment"`
	Started     time.Time   `json:"started"`
	Finished    time.Time   `json:"finished"`
	// Modes holds one result per mode entry, in scenario order.
	Modes []ModeResult `json:"modes"`
	// Host is the before/after check of the host namespace.
	Host HostCheck `json:"host"`
	// HostCalibration is the unit costs measured in a node on the host in
	// this run, when some mode ran in a VM.
	HostCalibration *Calibration `json:"hostCalibration,omitempty"`
	// Expectations are the scenario's thresholds and whether each was met.
	Expectations []Expectation `json:"expectations"`
	// Passed is true when every mode ran and every expectation was met.
	Passed bool `json:"passed"`
	// Sweep is set when the scenario swept a service group's size: Modes
	// then holds one entry per mode entry and size (see ModeResult.Sweep),
	// and this is their cost-versus-size view with fitted growth.
	Sweep *SweepResult `json:"sweep,omitempty"`
	// Variants are the binaries a comparison of variants ran (see
	// ModeResult.Variant), in the order they alternated.
	Variants []Variant `json:"variants,omitempty"`
	// Lanes is set when the VM entries ran in a lane beside the host
	// entries' (spec.vmLane: beside): the two shared the machine.
	Lanes *Lanes `json:"lanes,omitempty"`
}

// Lanes says how two lanes of entries shared the machine, and what it
// cost.
type Lanes struct {
	// Entries are the entries of each lane, in the order they ran.
	Host []LaneEntry `json:"host"`
	VM   []LaneEntry `json:"vm"`
	// HostCost is, per unit-cost kind (Calibration), how much slower the
	// host's unit costs were in the host entries' nodes that calibrated
	// while the VM lane ran than in the node that calibrated alone after
	// both lanes (Result.HostCalibration): a ratio with its 95% interval.
	HostCost map[string]RatioShift `json:"hostCost,omitempty"`
	// HostCostEntries are the host entries whose calibrations HostCost
	// pools.
	HostCostEntries []string `json:"hostCostEntries,omitempty"`
	// VMCost is the same for the VM: unit costs in the VM entries' nodes
	// that calibrated while the host lane ran (VMCostEntries[0]) against
	// those that calibrated after it (VMCostEntries[1]).
	VMCost        map[string]RatioShift `json:"vmCost,omitempty"`
	VMCostEntries [2][]string           `json:"vmCostEntries,omitzero"`
}

// LaneEntry is one entry's time in its lane, main node and oracle
// together.
type LaneEntry struct {
	Name     string    `json:"name"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	// Beside is the seconds of it during which the other lane was
	// running an entry.
	Beside float64 `json:"beside"`
}

// ScenarioInfo identifies a scenario file.
type ScenarioInfo struct {
	Name   string `json:"name"`
	File   string `json:"file"`
	Seed   int64  `json:"seed"`
	SHA256 string `json:"sha256"`
}

// Environment is the machine a run measured. Timings are only comparable
// between runs with the same environment.
type Environment struct {
	KernelRelease string `json:"kernelRelease"`
	// Kernel is "host" (the machine's own kernel) or "vm".
	Kernel string `json:"kernel"`
	CPUs   int    `json:"cpus"`
	// KubeProxyVersion is the k8s.io/kubernetes module the proxiers came
	// from.
	KubeProxyVersion string `json:"kubeProxyVersion"`
	GoVersion        string `json:"goVersion"`
}

// HostCheck is the host guard's verdict.
type HostCheck struct {
	// Checked is false when the snapshot could not be taken (Error says
	// why).
	Checked   bool   `json:"checked"`
	Unchanged bool   `json:"unchanged"`
	Diff      string `json:"diff,omitempty"`
	Error     string `json:"error,omitempty"`
}

// ModeResult is one mode entry's run in its own node process.
type ModeResult struct {
	// Name is the scenario's mode entry name, e.g. iptables-legacy.
	Name    string `json:"name"`
	Mode    string `json:"mode"`
	Backend string `json:"backend,omitempty"`
	// Binaries maps the programs the proxier ran to the files they
	// resolved to in the node.
	Binaries map[string]string `json:"binaries,omitempty"`
	// ToolVersions are the versions of the programs kube-proxy ran here
	// (iptables-legacy, iptables-nft, nft, ipset: their --version in the
	// node, in the VM for a VM mode) and how kpsim read IPVS ("ipvs
	// reader").
	ToolVersions map[string]string `json:"toolVersions,omitempty"`
	// Error is set when the node process failed; the other fields hold
	// what was measured before.
	Error string `json:"error,omitempty"`
	// Skipped says why the mode did not run on this machine.
	Skipped string `json:"skipped,omitempty"`
	// Placement says where the node ran: timings from a VM are only
	// comparable with timings from the same VM kernel and accelerator.
	Placement *Placement `json:"placement,omitempty"`
	// Calibration is the unit costs measured in this mode's node before
	// its proxier started; NativeEstimate scales a VM mode's syncs to the
	// host with it and the host's calibration (Result.HostCalibration).
	Calibration    *Calibration    `json:"calibration,omitempty"`
	NativeEstimate *NativeEstimate `json:"nativeEstimate,omitempty"`

	Steps []StepResult `json:"steps"`
	// Syncs is every sync of the proxier, in order.
	Syncs []Sync `json:"syncs"`
	// FirstSyncRepeats are more first syncs of this entry, each by a
	// fresh proxier in a node of its own at the scenario's initial API
	// state (kpsim run --twin-repeats): with Syncs[0], the spread of a
	// first sync between draws, which the twin check of the native
	// estimate compares by their medians.
	FirstSyncRepeats []Sync `json:"firstSyncRepeats,omitempty"`
	// FirstSyncRepeatCalibrations are the unit costs each repeat's node
	// measured before its first sync, in the order of FirstSyncRepeats
	// (nil where it has none): the twin check pools them with
	// Calibration (PoolCalibrations).
	FirstSyncRepeatCalibrations []*Calibration `json:"firstSyncRepeatCalibrations,omitempty"`
	// KubeProxyTotals are kube-proxy's own histogram counts and sums at
	// the end, against which Syncs can be checked.
	KubeProxyTotals Totals `json:"kubeProxyTotals"`
	// Startup is when the proxier was handed the node's topology labels
	// and the ServiceCIDRs (see Startup).
	Startup *Startup `json:"startup,omitempty"`
	// Faults are the injected faults and what they did; WriteRetries
	// counts churn writes retried after an injected API error.
	Faults       []FaultResult `json:"faults,omitempty"`
	WriteRetries int           `json:"writeRetries,omitempty"`
	// NetworkProgramming is kube-proxy's network programming latency
	// histogram: observations and their sum.
	NetworkProgramming ProgrammingLatency `json:"networkProgramming"`
	// EndToEnd is kpsim's own network programming latency: sampled
	// mutations, from the API write until real connections reach a new
	// endpoint or stop reaching a removed one.
	EndToEnd []LatencySample `json:"endToEnd,omitempty"`
	// Rules are dataplane counts after the first sync and at the end,
	// keyed like the scenario's rule expectations (iptables/nat, ...).
	RulesAfterFirstSync map[string]int `json:"rulesAfterFirstSync,omitempty"`
	Rules               map[string]int `json:"rules,omitempty"`
	// Dumps are the raw dataplane dumps saved in the run directory.
	Dumps []string `json:"dumps,omitempty"`
	// Probes are the probe steps' results, one per Service and port.
	Probes []Probe `json:"probes,omitempty"`
	// Distributions are the probe steps' verdicts: the share test over
	// their Services and the per-probe checks.
	Distributions []StepDistribution `json:"distributions,omitempty"`
	// DataPaths are the datapath steps' measurements: what a new
	// connection costs through the rules against one straight to a pod.
	DataPaths []DataPath `json:"dataPaths,omitempty"`
	// Resources: kube-proxy's and the harness's, apart.
	Resources Resources `json:"resources"`
	// KernelCalls sums the proxier's calls into its iptables interface
	// (utiliptables, wrapped and timed per call) by method: where a sync's
	// time goes. Empty in nftables mode, whose interface upstream creates
	// internally.
	KernelCalls map[string]CallStats `json:"kernelCalls,omitempty"`
	// ProgramTimer says how nftables mode's nft runs were timed.
	ProgramTimer *ProgramTimer `json:"programTimer,omitempty"`
	// ListReplay is kpsim's own timing of nftables mode's per-sync
	// listing against the table kube-proxy left at the end of the run.
	ListReplay *ListReplay `json:"listReplay,omitempty"`
	// Oracle compares the final dataplane with a fresh proxier's.
	Oracle *Oracle `json:"oracle,omitempty"`
	// Lifecycle holds the lifecycle steps' measurements (restart, tamper,
	// cleanup, migrate), in order. FinalMode and FinalBackend are the
	// mode kube-proxy ran last, when a migration changed it.
	Lifecycle    []Lifecycle `json:"lifecycle,omitempty"`
	FinalMode    string      `json:"finalMode,omitempty"`
	FinalBackend string      `json:"finalBackend,omitempty"`
	// Variant is set on the runs of a comparison of variants: which mode
	// entry, variant and run this is. Name is then <entry>@<variant>.<run>.
	Variant *VariantRun `json:"variant,omitempty"`
	// Sweep is set on the runs of a sweep: which mode entry and size this
	// is. Name is then <entry>@<count>.
	Sweep *SweepRun `json:"sweep,omitempty"`
}

// SweepRun places one ModeResult in a sweep.
type SweepRun struct {
	// Entry is the scenario's mode entry name (iptables-legacy).
	Entry string `json:"entry"`
	// Group is the swept service group; Count its size in this run.
	Group string `json:"group"`
	Count int    `json:"count"`
	// Services and Endpoints are the cluster's totals at this size, every
	// group and literal object included (what kube-proxy saw).
	Services  int `json:"services"`
	Endpoints int `json:"endpoints"`
	// Dir is the run's subdirectory, relative to the run directory: its
	// node log, dumps and the scenario document the node ran.
	Dir string `json:"dir"`
}

// SweepResult is a sweep's cost-versus-size view, built from the
// ModeResults of the sweep's runs (NewSweepResult).
type SweepResult struct {
	// Group is the swept service group; Counts the sizes asked for.
	Group  string `json:"group"`
	Counts []int  `json:"counts"`
	// FitMethod says how the growth exponents were obtained.
	FitMethod string      `json:"fitMethod"`
	Modes     []SweepMode `json:"modes"`
}

// SweepMode is one mode entry across the sweep's sizes.
type SweepMode struct {
	// Name is the mode entry name.
	Name    string `json:"name"`
	Mode    string `json:"mode"`
	Backend string `json:"backend,omitempty"`
	// Kernel is where its nodes ran, "host" or "vm": timings from a VM
	// are only comparable with timings from the same VM.
	Kernel string `json:"kernel"`
	// MaxCount is the scenario's cap for this entry (0: none).
	MaxCount int `json:"maxCount,omitempty"`
	// Points are the sizes that ran, ascending.
	Points []SweepPoint `json:"points"`
	// Skipped are the sizes that did not run, and why.
	Skipped []SweepSkip `json:"skipped,omitempty"`
	// Fits are the growth exponents over Points, one per metric.
	Fits []SweepFit `json:"fits,omitempty"`
}

// SweepPoint is one size of one mode entry.
type SweepPoint struct {
	// Count is the swept group's size.
	Count int `json:"count"`
	// Services and Endpoints are the cluster's totals at this size.
	Services  int `json:"services"`
	Endpoints int `json:"endpoints"`
	// Run names the Modes entry with everything measured.
	Run string `json:"run"`
	// Placement is "host" or "vm".
	Placement string `json:"placement"`
	// FirstSyncSeconds is the first full sync, as measured where the node
	// ran; for a VM, FirstSyncHostEstimate is the native estimate
	// (estimate, low, high; see ModeResult.NativeEstimate).
	FirstSyncSeconds      float64     `json:"firstSyncSeconds,omitempty"`
	FirstSyncHostEstimate *[3]float64 `json:"firstSyncHostEstimate,omitempty"`
	// FirstSyncParts splits the first sync by part (Sync.Kernel) plus
	// PartRest, in seconds; empty when nothing was timed.
	FirstSyncParts map[string]float64 `json:"firstSyncParts,omitempty"`
	// ListReplay is kpsim's timing of nftables mode's listing at the end
	// of the run (ModeResult.ListReplay).
	ListReplay *ListReplay `json:"listReplay,omitempty"`
	// Rules are the dataplane counts right after the first sync, every
	// kind the mode's reader reports (iptables/nat, nftables/rules, ...).
	Rules map[string]int `json:"rules,omitempty"`
	// PeakRSSBytes is kube-proxy's process's peak resident set size.
	PeakRSSBytes int64 `json:"peakRSSBytes"`
	// DataPath is the figures of the run's last datapath step, if any.
	DataPath *DataPathFigures `json:"dataPath,omitempty"`
	// Error is set when the run failed; the point is then not fitted.
	Error string `json:"error,omitempty"`
}

// SweepSkip is a size a mode entry did not run.
type SweepSkip struct {
	Count  int    `json:"count"`
	Reason string `json:"reason"`
}

// SweepFit is one metric's growth over a mode entry's points: the least
// squares line ln(metric) = Intercept + Exponent * ln(services).
type SweepFit struct {
	// Metric is "firstSync" (seconds), "peakRSS" (bytes) or "rules/" and
	// a rule count kind ("rules/iptables/nat").
	Metric    string  `json:"metric"`
	Exponent  float64 `json:"exponent"`
	Intercept float64 `json:"intercept"`
	// RSquared is the fit's coefficient of determination in log space.
	RSquared float64 `json:"rSquared"`
	// Points is how many points were fitted (those with a positive value).
	Points int `json:"points"`
}

// Oracle is the after-churn check: the dataplane the proxier reached
// through the run, normalized, against what a fresh proxier of the same
// mode built from the final API state in one full sync (in a second node
// process).
type Oracle struct {
	// Checked is false when the comparison could not be made (Error) or
	// was not asked for (Skipped).
	Checked bool `json:"checked"`
	// Skipped says why the scenario did not run the oracle for this entry.
	Skipped string `json:"skipped,omitempty"`
	Equal   bool   `json:"equal"`
	// Diff is "-" lines only the fresh proxier wrote, "+" lines only the
	// churned one has.
	Diff  string `json:"diff,omitempty"`
	Error string `json:"error,omitempty"`
	// Lines is the size of the compared normalized dump.
	Lines int `json:"lines"`
	// Unreachable counts iptables chains in the churned dataplane that
	// nothing jumps to and the fresh one does not have (kube-proxy leaves
	// removed endpoints' chains after partial syncs and deletes them in a
	// later full sync); they are not compared. UnreachableInFresh counts
	// unreferenced chains in the fresh proxier's (its canary chains).
	Unreachable int `json:"unreachable,omitempty"`
	// Draining counts IPVS real servers at weight 0 in the churned
	// dataplane (removed endpoints kept until their connections end);
	// they take no new connections and are not compared.
	Draining           int      `json:"draining,omitempty"`
	UnreachableSample  []string `json:"unreachableSample,omitempty"`
	UnreachableInFresh int      `json:"unreachableInFresh,omitempty"`
	// Learned counts the state in the churned dataplane that packets
	// wrote, not the proxier (nftables ClientIP affinity-set elements,
	// IPVS connection counts: rules.Dump Learned, saved as
	// <mode>.end.<kind>.learned.gz); the normalized dumps leave it out, so
	// it is not compared. LearnedSample holds up to 5 of its lines.
	Learned       int      `json:"learned,omitempty"`
	LearnedSample []string `json:"learnedSample,omitempty"`
	// Files are the two normalized dumps compared, in the run directory.
	Files []string `json:"files,omitempty"`
}

// StepResult is one scenario step in one mode.
type StepResult struct {
	Name   string    `json:"name"`
	Action string    `json:"action"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
	Error  string    `json:"error,omitempty"`
	// Mutations and Skipped count a churn step's API mutations.
	Mutations int `json:"mutations,omitempty"`
	Skipped   int `json:"skipped,omitempty"`
	// SyncSeconds is, for a sync step, how long the proxier took to
	// catch up (from the step's start).
	SyncSeconds float64 `json:"syncSeconds,omitempty"`
}

// Sync is one proxier sync, from kube-proxy's own histogram: Seconds is
// exact, Start and End are bounds set by polling.
type Sync struct {
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	Seconds float64   `json:"seconds"`
	Full    bool      `json:"full"`
	// Merged > 1 when several syncs ended between two polls; Seconds is
	// then their sum.
	Merged    int  `json:"merged"`
	Succeeded bool `json:"succeeded"`
	// Process counts the kube-proxy processes before the one that ran
	// this sync: 0 for the first, 1 after one restart or migration.
	Process int `json:"process,omitempty"`
	// Kernel is the time the sync spent in timed kernel-programming calls,
	// in seconds by part, from calls that started within [Start, End]:
	// iptables-restore, iptables-save and iptables (the other iptables
	// program runs); ipset (program runs); ipvs (netlink requests);
	// nft-list, nft-transaction and nft (checks) in nftables mode, timed
	// by kpsim-exectimer. The rest of Seconds is the proxier's own work.
	// A part's kind (PartKind) is the text before its first "-". Results
	// written before the parts existed hold kinds only.
	Kernel map[string]float64 `json:"kernel,omitempty"`
}

// Variant is one kpsim binary of a comparison.
type Variant struct {
	Name   string `json:"name"`
	Binary string `json:"binary"`
	// Version is what `kpsim version` of the binary printed: the
	// kube-proxy release or checkout it was built from.
	Version string `json:"version"`
}

// VariantRun places one ModeResult in a comparison of variants.
type VariantRun struct {
	// Entry is the scenario's mode entry, Variant the variant's name and
	// Run which of its runs (from 1).
	Entry   string `json:"entry"`
	Variant string `json:"variant"`
	Run     int    `json:"run"`
	// Dir is the run's directory under the run directory.
	Dir string `json:"dir"`
}

// RunName is the ModeResult name of this run: <entry>@<variant>.<run>.
func (v *VariantRun) RunName() string { return fmt.Sprintf("%s@%s.%d", v.Entry, v.Variant, v.Run) }

// Entry is the scenario's mode entry a result ran: its name, or for a run
// of a sweep or of a variant, the entry it repeats.
func (m *ModeResult) Entry() string {
	switch {
	case m.Variant != nil:
		return m.Variant.Entry
	case m.Sweep != nil:
		return m.Sweep.Entry
	}
	return m.Name
}

// ProgramTimer is how kube-proxy's program runs that kpsim cannot time
// from Go (nft in nftables mode) were timed: through kpsim-exectimer,
// first in kube-proxy's PATH.
type ProgramTimer struct {
	// Programs are the programs run through the timer.
	Programs []string `json:"programs,omitempty"`
	// OverheadSeconds is what the timer adds to each run it times, counted
	// in the sync's rest: the median of 21 runs of true through it minus
	// the median of 21 direct runs, measured in the node (the harness's
	// CPU) when kube-proxy first started in nftables mode.
	OverheadSeconds float64 `json:"overheadSeconds,omitempty"`
	// Missing says why nothing was timed.
	Missing string `json:"missing,omitempty"`
}

// ListReplayMethod says how a ListReplay is obtained.
const ListReplayMethod = "at the end of the run, kpsim lists the kube-proxy table it left with the calls kube-proxy's " +
	"sync makes (knftables, the same library): chains and sets over netlink as v1.37+ does (NFTablesNetlink), and " +
	"nft --json --terse list table as v1.36 did (ListAll); each timed 3 times in the node, median. Measured by " +
	"kpsim beside kube-proxy, not inside it: an estimate of what listing costs each sync at this size."

// ListReplay times nftables mode's listing (ListReplayMethod).
type ListReplay struct {
	Method string `json:"method"`
	Runs   int    `json:"runs"`
	// Chains and Sets are what the listings found.
	Chains int `json:"chains"`
	Sets   int `json:"sets"`
	// Median seconds of each listing.
	NetlinkChainsSeconds float64 `json:"netlinkChainsSeconds"`
	NetlinkSetsSeconds   float64 `json:"netlinkSetsSeconds"`
	NFTListTableSeconds  float64 `json:"nftListTableSeconds"`
	// Error says why the replay could not be measured (the run goes on).
	Error string `json:"error,omitempty"`
}

// Totals are kube-proxy's histogram counts and sums.
type Totals struct {
	SyncCount      uint64  `json:"syncCount"`
	SyncSeconds    float64 `json:"syncSeconds"`
	FullCount      uint64  `json:"fullCount"`
	FullSeconds    float64 `json:"fullSeconds"`
	PartialCount   uint64  `json:"partialCount"`
	PartialSeconds float64 `json:"partialSeconds"`
	// kube-proxy's failure counters: failed iptables-restore runs
	// (iptables and IPVS modes; partial: failed partial syncs) and failed
	// nft transactions (nftables mode: syncs and stale-chain cleanups).
	RestoreFailures         uint64 `json:"restoreFailures,omitempty"`
	PartialRestoreFailures  uint64 `json:"partialRestoreFailures,omitempty"`
	NFTablesSyncFailures    uint64 `json:"nftablesSyncFailures,omitempty"`
	NFTablesCleanupFailures uint64 `json:"nftablesCleanupFailures,omitempty"`
}

// FaultResult is one armed fault (spec.faults or a fault step) and what it
// did by the end of the node's run.
type FaultResult struct {
	// Where armed it: spec.faults[i] or the step's name.
	Where string `json:"where"`
	// Kind is command or api.
	Kind string `json:"kind"`
	// Target is the program (command) or resource and verbs (api).
	Target string `json:"target"`
	// Armed is how many failures were asked for (command failures, API
	// errors); Injected how many happened.
	Armed    int `json:"armed"`
	Injected int `json:"injected"`
	// Delayed is how many API calls were held for the fault's delay.
	Delayed int `json:"delayed,omitempty"`
	// ByVerb counts the faulted API calls per verb.
	ByVerb map[string]int `json:"byVerb,omitempty"`
}

// ProgrammingLatency summarises kube-proxy's
// network_programming_duration_seconds histogram: it holds only a count
// and a sum per poll, so only the mean is exact.
type ProgrammingLatency struct {
	Count       uint64  `json:"count"`
	SumSeconds  float64 `json:"sumSeconds"`
	MeanSeconds float64 `json:"meanSeconds"`
}

// Probe is one probe of one Service port.
type Probe struct {
	Step     string `json:"step"`
	Service  string `json:"service"`
	Port     string `json:"port"`
	Protocol string `json:"protocol"`
	From     string `json:"from"`
	Target   string `json:"target"`
	Sent     int    `json:"sent"`
	OK       int    `json:"ok"`
	// Failures by kind (timeout, refused, ...).
	Failures map[string]int `json:"failures,omitempty"`
	// Endpoints counts replies per endpoint address:port that answered.
	Endpoints map[string]int `json:"endpoints"`
	// Expected are the endpoints (address:targetPort) that may take this
	// probe's connections, by Rule; Stray counts replies from any other.
	Expected []string `json:"expected"`
	Rule     string   `json:"rule"`
	Stray    int      `json:"stray"`
	// SourcePreserved counts replies whose source, as the pod saw it, was
	// the client's own address.
	SourcePreserved int     `json:"sourcePreserved"`
	Seconds         float64 `json:"seconds"`
}

// Resources of a mode's run, from getrusage(2) read inside each process.
// kube-proxy runs in a process of its own in the node: the upstream
// proxier, its informers, its API client and kpsim's sync recorder. The
// harness runs beside it (Harness): the node process (the fake API server
// kube-proxy watches, churn, steps, rule readers) and the dataplane
// process (the fake pods' responders, the prober).
type Resources struct {
	// CPUSeconds is user+system CPU time of kube-proxy's process, its
	// whole life (schema v1alpha1: the node process, harness included).
	CPUSeconds float64 `json:"cpuSeconds"`
	// ChildCPUSeconds is that of the programs kube-proxy ran and waited
	// for (iptables-restore, nft, ipset, ...).
	ChildCPUSeconds float64 `json:"childCPUSeconds"`
	// MaxRSSBytes is kube-proxy's process's peak resident set size, and
	// StartRSSBytes its resident set before the proxier started: kpsim's
	// binary's own (Go runtime, package initialisation of all it links).
	MaxRSSBytes   int64 `json:"maxRSSBytes"`
	StartRSSBytes int64 `json:"startRSSBytes,omitempty"`
	// Harness is what the harness cost; nil in schema v1alpha1.
	Harness *HarnessResources `json:"harness,omitempty"`
	// Memory samples kube-proxy's process every MemorySampleSeconds:
	// resident set (/proc/self/statm) and Go heap in use
	// (runtime.MemStats HeapAlloc), from its start to the end.
	Memory              []MemorySample `json:"memory,omitempty"`
	MemorySampleSeconds float64        `json:"memorySampleSeconds,omitempty"`
}

// HarnessResources is what the harness cost beside kube-proxy, over the
// node's whole life.
type HarnessResources struct {
	// NodeCPUSeconds and NodeMaxRSSBytes: the node process's
	// getrusage(RUSAGE_SELF): the fake API server, churn, steps.
	NodeCPUSeconds  float64 `json:"nodeCPUSeconds"`
	NodeMaxRSSBytes int64   `json:"nodeMaxRSSBytes"`
	// ProgramCPUSeconds is the CPU time of the Programs the node process
	// ran (calibration; iptables-save, nft list, ipset save for the rule
	// counts, the shares and the oracle), from wait4.
	ProgramCPUSeconds float64 `json:"programCPUSeconds"`
	Programs          int     `json:"programs"`
	// DataplaneCPUSeconds and DataplaneMaxRSSBytes: the dataplane
	// process's getrusage(RUSAGE_SELF), read inside it: the fake pods'
	// responders and the prober. Zero when it had none (the oracle).
	DataplaneCPUSeconds  float64 `json:"dataplaneCPUSeconds"`
	DataplaneMaxRSSBytes int64   `json:"dataplaneMaxRSSBytes"`
}

// CPUSeconds is the harness's CPU time in all.
func (h HarnessResources) CPUSeconds() float64 {
	return h.NodeCPUSeconds + h.ProgramCPUSeconds + h.DataplaneCPUSeconds
}

// KubeProxyCPUSeconds is the node process's CPU time and its programs'.
func (r Resources) KubeProxyCPUSeconds() float64 { return r.CPUSeconds + r.ChildCPUSeconds }

// MemorySample is one sample of the node's memory.
type MemorySample struct {
	At        time.Time `json:"at"`
	RSSBytes  int64     `json:"rssBytes"`
	HeapBytes int64     `json:"heapBytes"`
}

// Placement is where a mode's node ran.
type Placement struct {
	// Kernel is "host" (Environment's kernel) or "vm".
	Kernel string `json:"kernel"`
	// For a VM: its kernel, the accelerator ("kvm", or "tcg": software
	// emulation, program starts about 35x and kernel work 8-10x slower
	// than on the host) and why KVM was not used.
	KernelRelease string  `json:"kernelRelease,omitempty"`
	KernelPackage string  `json:"kernelPackage,omitempty"`
	Accel         string  `json:"accel,omitempty"`
	AccelNote     string  `json:"accelNote,omitempty"`
	BootSeconds   float64 `json:"bootSeconds,omitempty"`
	TotalSeconds  float64 `json:"totalSeconds,omitempty"`
	// QEMUAccel and QEMUCPU are qemu's -accel and -cpu arguments, and
	// KernelArgs the guest kernel's command line: what a VM timing depends
	// on (norandmaps makes program starts about 4x cheaper under tcg).
	QEMUAccel  string `json:"qemuAccel,omitempty"`
	QEMUCPU    string `json:"qemuCPU,omitempty"`
	KernelArgs string `json:"kernelArgs,omitempty"`
	// GuestClock is the node's life as the guest's clock and the host's
	// measured it: every VM timing rests on the guest's clock.
	GuestClock *GuestClock `json:"guestClock,omitempty"`
}

// GuestClock is one interval measured on both clocks.
type GuestClock struct {
	GuestSeconds float64 `json:"guestSeconds"`
	HostSeconds  float64 `json:"hostSeconds"`
}

// String says how far the guest's clock ran from the host's.
func (c GuestClock) String() string {
	if c.HostSeconds <= 0 {
		return "no host interval to compare the guest's clock with"
	}
	off := c.GuestSeconds/c.HostSeconds - 1
	s := fmt.Sprintf("the guest's clock measured the node's life as %s where the host saw %s (%+.2f%%)", seconds(c.GuestSeconds), seconds(c.HostSeconds), 100*off)
	if math.Abs(off) > guestClockTolerance {
		s += ": its timings are off by as much"
	}
	return s
}

// guestClockTolerance is how far the guest's clock may run from the
// host's before a report says its timings are off: the markers cross the
// serial console, a few milliseconds over minutes.
const guestClockTolerance = 0.01

// LatencySample is one end-to-end network programming measurement.
type LatencySample struct {
	Mutation int    `json:"mutation"`
	Action   string `json:"action"`
	Service  string `json:"service"`
	// Endpoint is the address:port that appeared (Appear) or went away.
	Endpoint string `json:"endpoint"`
	Appear   bool   `json:"appear"`
	// Written is the change's trigger time (just before the API write).
	Written time.Time `json:"written"`
	// Observed is when probes first reached the new endpoint (the end of
	// that probe batch) or the start of the run of probes that no longer
	// reached the removed one.
	Observed time.Time `json:"observed"`
	// Seconds is Observed - Written; ResolutionSeconds the length of the
	// probe batch that decided it.
	Seconds           float64 `json:"seconds"`
	ResolutionSeconds float64 `json:"resolutionSeconds"`
	// Probes is how many connections the measurement made.
	Probes int `json:"probes"`
	// Superseded is the mutation that changed the endpoint again before
	// the change was seen; such a sample has no latency.
	Superseded int    `json:"superseded,omitempty"`
	Error      string `json:"error,omitempty"`
}

// EndToEndSeconds returns the successful end-to-end samples' latencies.
func (m *ModeResult) EndToEndSeconds() []float64 {
	var xs []float64
	for _, s := range m.EndToEnd {
		if s.Error == "" && s.Superseded == 0 {
			xs = append(xs, s.Seconds)
		}
	}
	return xs
}

// StepDistribution is one probe step's verdict.
type StepDistribution struct {
	Step string `json:"step"`
	// Connections per Service port (rounded up to whole round-robin turns
	// under IPVS rr); Plan is the power calculation that set it when the
	// scenario left it to kpsim.
	Connections int        `json:"connections"`
	Plan        *ProbePlan `json:"plan,omitempty"`
	// ServicePower and PooledPower are the design's skews' power at
	// Connections (equal to the plan's when kpsim set the count).
	ServicePower float64 `json:"servicePower,omitempty"`
	PooledPower  float64 `json:"pooledPower,omitempty"`
	// Report is the share test over the Services with more than one
	// eligible endpoint and no session affinity.
	Report *DistributionReport `json:"report,omitempty"`
	// ImpliedError says why rule-implied shares are missing, if they are.
	ImpliedError string `json:"impliedError,omitempty"`
	// Checks are the per-probe checks a share test cannot make.
	Checks []ProbeCheck `json:"checks"`
	Passed bool         `json:"passed"`
}

// ProbeCheck is one pass/fail check of one probed Service port.
type ProbeCheck struct {
	Service string `json:"service"`
	Check   string `json:"check"`
	Passed  bool   `json:"passed"`
	Detail  string `json:"detail"`
}

// CallStats sums the calls of one method.
type CallStats struct {
	Count   int     `json:"count"`
	Seconds float64 `json:"seconds"`
	// Bytes is the input of restores and the output of saves.
	Bytes  int `json:"bytes"`
	Errors int `json:"errors"`
}

// Expectation is one threshold of the scenario and its outcome.
type Expectation struct {
	// Name says what was checked, e.g. "syncP99" or "rules iptables/nat".
	Name string `json:"name"`
	// Mode is the mode entry it applied to ("" for run-wide ones).
	Mode string `json:"mode,omitempty"`
	// Want is the threshold, Got what was measured, both as text.
	Want   string `json:"want"`
	Got    string `json:"got"`
	Passed bool   `json:"passed"`
	// Detail says by how much it missed, or why it could not be checked.
	Detail string `json:"detail,omitempty"`
}

// WriteFile writes r as indented JSON.
func (r *Result) WriteFile(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding result: %w", err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing result: %w", err)
	}
	return nil
}

// ReadFile reads a result.json, refusing other schema versions.
func ReadFile(path string) (*Result, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading result: %w", err)
	}
	var r Result
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("%s: decoding result: %w", path, err)
	}
	if r.SchemaVersion != SchemaVersion && r.SchemaVersion != schemaV1alpha1 {
		return nil, fmt.Errorf("%s: result schema %q, this kpsim reads %q", path, r.SchemaVersion, SchemaVersion)
	}
	return &r, nil
}
