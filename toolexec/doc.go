// Package toolexec is the one seam through which kpsim itself runs the
// kernel's tools: the rule readers (iptables-save, nft, ipset), the host
// guard's dumps and the calibration's timed runs. [Exec] runs the real
// programs and keeps their count and CPU time, so a node can tell its own
// programs' cost from kube-proxy's; [Fake] is a strict stand-in for unit
// tests. knftables' execer is the model.
//
// What it must not do: run the programs kube-proxy runs (the proxiers
// exec them through k8s.io/utils/exec, observed by package proxier);
// choose a namespace (programs run in the caller's); hide a program's
// standard error (an error carries it).
package toolexec
