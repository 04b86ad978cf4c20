// Package orchestrator is the host side of a kpsim run: it loads and
// validates the scenario, selects the mode entries and places each on the
// host kernel or in a VM, checks this machine's limits before anything is
// created, snapshots the host, starts one node per mode (and per sweep
// size), runs the after-churn oracle, estimates VM timings on the host,
// checks the expectations and writes result.json.
//
// Its failures are typed ([Error], [Kind]) so the CLI can map them to exit
// codes; it renders nothing but progress lines.
//
// What it must not do: touch the host's network state (it only starts
// processes and VMs and reads the host's rules for the snapshot); run a
// proxier, a fake pod or a probe itself (package node does, in a node);
// import the CLI.
package orchestrator
