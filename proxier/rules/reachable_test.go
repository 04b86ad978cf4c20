package rules

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReachableIPTables(t *testing.T) {
	in := `# ipv4
*nat
:KUBE-SEP-LIVE -
:KUBE-SEP-STALE -
:KUBE-SERVICES -
:KUBE-SVC-A -
:OUTPUT ACCEPT
:PREROUTING ACCEPT
-A KUBE-SEP-LIVE -p tcp -j DNAT --to-destination 10.244.0.1:80
-A KUBE-SEP-STALE -p tcp -j DNAT --to-destination 10.244.0.2:80
-A KUBE-SERVICES -d 10.96.0.10/32 -j KUBE-SVC-A
-A KUBE-SVC-A -j KUBE-SEP-LIVE
-A OUTPUT -j KUBE-SERVICES
COMMIT
*filter
:INPUT ACCEPT
:KUBE-ORPHAN -
-A KUBE-ORPHAN -j DROP
COMMIT
`
	want := `# ipv4
*nat
:KUBE-SEP-LIVE -
:KUBE-SERVICES -
:KUBE-SVC-A -
:OUTPUT ACCEPT
:PREROUTING ACCEPT
-A KUBE-SEP-LIVE -p tcp -j DNAT --to-destination 10.244.0.1:80
-A KUBE-SERVICES -d 10.96.0.10/32 -j KUBE-SVC-A
-A KUBE-SVC-A -j KUBE-SEP-LIVE
-A OUTPUT -j KUBE-SERVICES
COMMIT
*filter
:INPUT ACCEPT
COMMIT
`
	got, unreachable := ReachableIPTables(in)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("kept (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"filter/KUBE-ORPHAN", "nat/KUBE-SEP-STALE"}, unreachable); diff != "" {
		t.Errorf("unreachable (-want +got):\n%s", diff)
	}
	// A dataplane whose only difference is an unreachable chain is equal
	// in behaviour; one that differs in a reachable rule is not.
	other, _ := ReachableIPTables(want)
	if other != got {
		t.Errorf("removing unreachable chains changed the reachable part")
	}
}

// A text cut short of COMMIT still counts its last line, and a lone table
// line is no panic (found by FuzzReachableIPTables, kept as a seed).
func TestReachableIPTablesWithoutCommit(t *testing.T) {
	got, unreachable := ReachableIPTables("*nat\n:OUTPUT ACCEPT\n:A -\n:B -\n-A OUTPUT -j A")
	if want := "*nat\n:OUTPUT ACCEPT\n:A -\n-A OUTPUT -j A"; got != want {
		t.Errorf("kept %q, want %q", got, want)
	}
	if d := cmp.Diff([]string{"nat/B"}, unreachable); d != "" {
		t.Errorf("unreachable (-want +got):\n%s", d)
	}
	if got, unreachable := ReachableIPTables("*"); got != "*" || len(unreachable) != 0 {
		t.Errorf("lone table line: %q %v", got, unreachable)
	}
}

func TestStaleNFTChains(t *testing.T) {
	in := `chain a {"name":"a"}
  rule {"expr":[{"goto":{"target":"b"}}]}
chain b {"name":"b"}
chain c {"name":"c"}
map m {"name":"m"}
  elem [{"elem":1},{"goto":{"target":"d"}}]
chain d {"name":"d"}
chain e {"name":"e"}
  rule {"expr":[]}
`
	got, stale := StaleNFTChains(in)
	want := `chain a {"name":"a"}
  rule {"expr":[{"goto":{"target":"b"}}]}
chain b {"name":"b"}
map m {"name":"m"}
  elem [{"elem":1},{"goto":{"target":"d"}}]
chain d {"name":"d"}
chain e {"name":"e"}
  rule {"expr":[]}
`
	if got != want || len(stale) != 1 || stale[0] != "c" {
		t.Errorf("StaleNFTChains: stale %v, got:\n%s", stale, got)
	}
}
