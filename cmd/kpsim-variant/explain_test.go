package main

import (
	"io/fs"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// upstreamGo is a per-release file as proxier/upstream.go has them.
const upstreamGo = `package proxier

func newNFTablesProxier(ctx context.Context, cfg *Config) (proxy.Provider, error) {
	// upstream API: nftables.NewProxier's signature (v1.37: the whole *KubeProxyConfiguration)
	p, err := nftables.NewProxier(ctx, cfg, v1.IPv4Protocol,
		nodeName, false)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// upstream API: utiliptables.Interface's method set
var _ utiliptables.Interface = (*timedIPTables)(nil)

func unmarked() {
	metrics.RegisterMetrics(mode)
}
`

func TestExplain(t *testing.T) {
	files := map[string]string{"proxier/upstream.go": upstreamGo}
	readFile := func(name string) ([]byte, error) {
		if s, ok := files[name]; ok {
			return []byte(s), nil
		}
		return nil, fs.ErrNotExist
	}
	for _, tc := range []struct {
		name, output, want string
	}{
		{
			name: "signature and method set",
			output: `# github.com/kpsim/kpsim/proxier
proxier/upstream.go:5:46: not enough arguments in call to nftables.NewProxier
	have (context.Context, *Config)
	want (context.Context, v1.IPFamily, time.Duration)
proxier/upstream.go:6:3: cannot use nodeName (variable of type string) as time.Duration value
proxier/upstream.go:14:32: cannot use (*timedIPTables)(nil) as utiliptables.Interface value: missing method HasRandomFully
`,
			want: `kpsim's adapters do not build against v1.35.4: upstream changed
  - nftables.NewProxier's signature (v1.37: the whole *KubeProxyConfiguration)
      proxier/upstream.go:5:46: not enough arguments in call to nftables.NewProxier
      proxier/upstream.go:6:3: cannot use nodeName (variable of type string) as time.Duration value
  - utiliptables.Interface's method set
      proxier/upstream.go:14:32: cannot use (*timedIPTables)(nil) as utiliptables.Interface value: missing method HasRandomFully
` + perReleaseNote,
		},
		{
			// The blank line above unmarked() ends the search: the
			// mark of the var above does not name this error.
			name:   "no mark",
			output: "proxier/upstream.go:17:10: undefined: metrics.RegisterMetrics\nproxier/gone.go:3:1: undefined: x\n",
			want: `kpsim's adapters do not build against v1.35.4: upstream changed
  - an API kpsim uses outside its per-release code (no "// upstream API:" mark there):
      proxier/upstream.go:17:10: undefined: metrics.RegisterMetrics
      proxier/gone.go:3:1: undefined: x
` + perReleaseNote,
		},
		{
			name: "failed outside kpsim",
			output: `# k8s.io/kubernetes/pkg/proxy
/root/go/pkg/mod/k8s.io/kubernetes@v1.35.4/pkg/proxy/node.go:12:2: undefined: x
../kubernetes/pkg/proxy/node.go:12:2: undefined: y
go: k8s.io/kubernetes@v1.35.4: missing go.sum entry
`,
			want: "kpsim's adapters were not reached: the build against v1.35.4 failed before kpsim's own code (see go's errors above).\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, explain(tc.output, "v1.35.4", readFile)); diff != "" {
				t.Errorf("explain() (-want +got):\n%s", diff)
			}
		})
	}
}

const perReleaseNote = "kpsim's per-release code is proxier/upstream.go (v1.37 on) and proxier/upstream_v1_36.go (tag kube_1_36);\n" +
	"a release whose API differs from both needs a file of its own, with a build tag cmd/kpsim-variant sets for it.\n"

func TestMarkAbove(t *testing.T) {
	for _, tc := range []struct {
		line int
		want string
	}{
		{line: 4, want: "nftables.NewProxier's signature (v1.37: the whole *KubeProxyConfiguration)"},
		{line: 6, want: "nftables.NewProxier's signature (v1.37: the whole *KubeProxyConfiguration)"},
		{line: 3, want: ""},  // the func line: its block starts after a blank line
		{line: 17, want: ""}, // below a blank line
		{line: 99, want: ""}, // past the end (the file changed since the build)
	} {
		if got := markAbove(upstreamGo, tc.line); got != tc.want {
			t.Errorf("markAbove(line %d) = %q, want %q", tc.line, got, tc.want)
		}
	}
}
