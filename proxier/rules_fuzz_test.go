package proxier

import (
	"testing"
)

func FuzzParseIPTablesSave(f *testing.F) {
	for _, name := range []string{"kube-proxy-iptables-legacy.save", "kube-proxy-iptables-nft.save", "iptables-crafted-counters.save", "ip6tables-crafted.save", "iptables-crafted.input.rules"} {
		f.Add(readTestdata(f, name))
	}
	f.Add([]byte("*filter\n:INPUT ACCEPT [0:0]\n[1:2] -A INPUT -j ACCEPT\nCOMMIT\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseIPTablesSave(b)
		if err != nil {
			return
		}
		for name, tab := range c.Tables {
			if len(tab.ChainRules) != tab.Chains || tab.SVC+tab.SVL+tab.SEP+tab.FW+tab.EXT > tab.Chains {
				t.Errorf("%s: inconsistent counts %+v", name, tab)
			}
		}
		// Whatever parses normalizes, and the normalized form is a fixed
		// point with the same counts.
		n, err := NormalizeIPTablesSave(b)
		if err != nil {
			t.Fatalf("parsed but did not normalize: %v", err)
		}
		n2, err := NormalizeIPTablesSave([]byte(n))
		if err != nil || n2 != n {
			t.Fatalf("normalized form is not a fixed point: %v\n%s", err, DiffNormalized(n, n2))
		}
		c2, err := ParseIPTablesSave([]byte(n))
		if err != nil {
			t.Fatal(err)
		}
		for name, tab := range c.Tables {
			if c2.Tables[name].Rules != tab.Rules || c2.Tables[name].Chains != tab.Chains {
				t.Errorf("%s: counts changed by normalizing", name)
			}
		}
	})
}

func FuzzParseNFTJSON(f *testing.F) {
	for _, name := range []string{"kube-proxy-nft.json", "nft-crafted.json"} {
		f.Add(readTestdata(f, name))
	}
	f.Add([]byte(`{"nftables": [{"table": {"family": "ip", "name": "kube-proxy"}}, {"set": {"family": "ip", "table": "kube-proxy", "name": "s", "elem": [1, {"set": [3, 2]}]}}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseNFTJSON(b)
		if err != nil {
			return
		}
		if c.Rules < 0 || c.SetElements < 0 || c.MapElements < 0 {
			t.Errorf("negative counts %+v", c)
		}
		if _, err := NormalizeNFTJSON(b); err != nil {
			t.Fatalf("parsed but did not normalize: %v", err)
		}
	})
}
