// Package rules reads, counts, normalizes and compares the dataplane a
// kube-proxy proxier leaves in the kernel: iptables-save and ip6tables-save
// text, nft JSON, the IPVS table of /proc/net/ip_vs and ipset save text.
// It also computes the traffic split those rules imply (the exact share of
// new connections each endpoint gets), so reports can tell a skew in the
// rules from the sampling error of probes.
//
// The parsers take bytes and return values; the readers (ReadIPTables,
// ReadNFTables, ReadIPVS) run the standard tools through a toolexec.Runner
// in the calling process's network namespace and hand their output to the
// parsers.
//
// It must import only the standard library and package toolexec (itself
// standard library only): no k8s.io module, nothing of
// package proxier. Its unit tests and fuzz targets then build a small
// binary that coverage instrumentation keeps fast (thousands of executions
// a second instead of a few with the kube imports). Anything that needs
// the upstream proxiers belongs in package proxier, which imports this one.
package rules
