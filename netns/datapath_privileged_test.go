package netns

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

const dataPathNodeMain = "test-datapath"

type dataPathInput struct {
	Services []fixtureService `json:"services"`
	Rules    string           `json:"rules"`
	Rounds   int              `json:"rounds"`
	Count    int              `json:"count"`
}

type dataPathOutput struct {
	Rounds []DataPathResult `json:"rounds"`
	// CPUsBefore and CPUsAfter are the dataplane process's threads'
	// Cpus_allowed_list before the first round and after the last.
	CPUsBefore, CPUsAfter map[string]int
}

// runDataPathNode starts a dataplane, loads a DNAT fixture and measures
// rounds of the data path through it.
func runDataPathNode(ctx context.Context, env *NodeEnv) error {
	var in dataPathInput
	if err := env.Recv(&in); err != nil {
		return err
	}
	d, err := env.StartDataplane(PodNetworkConfig{Ports: []Port{{TCP, 8080}}})
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.AddEndpoints(allEndpoints(in.Services)); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "iptables-legacy-restore")
	cmd.Stdin = strings.NewReader(in.Rules)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("iptables-legacy-restore: %w: %s", err, b)
	}
	out := dataPathOutput{CPUsBefore: processCPUs(d.Pid())}
	for r := range in.Rounds {
		spec := DataPathSpec{Connections: in.Count, Concurrency: 4, CPU: -1, Round: r}
		for _, s := range in.Services {
			spec.Targets = append(spec.Targets, DataPathTarget{
				Service: netip.AddrPortFrom(s.ClusterIP, s.Port),
				Direct:  netip.AddrPortFrom(s.Endpoints[r%len(s.Endpoints)], s.TargetPort),
			})
		}
		res, err := d.DataPath(ctx, spec)
		if err != nil {
			return err
		}
		out.Rounds = append(out.Rounds, res)
	}
	out.CPUsAfter = processCPUs(d.Pid())
	return env.SetResult(out)
}

// processCPUs counts pid's threads by their Cpus_allowed_list.
func processCPUs(pid int) map[string]int {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	ents, _ := os.ReadDir(dir)
	out := map[string]int{}
	for _, e := range ents {
		b, err := os.ReadFile(dir + "/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
				out[strings.TrimSpace(v)]++
			}
		}
	}
	return out
}

// TestPrivilegedDataPath measures two rounds through a DNAT fixture of 3
// Services x 2 endpoints: every connection of both kinds is made and
// answered by the right endpoint, the kinds alternate, the pinned CPU's
// time moves, and the dataplane's threads get their CPUs back.
func TestPrivilegedDataPath(t *testing.T) {
	requireRoot(t, "iptables-legacy-restore")
	svcs := makeServices(3, 2, TCP, 80, 8080)
	in := dataPathInput{Services: svcs, Rules: iptablesFixture(DefaultNodeIP.Addr(), svcs), Rounds: 2, Count: 300}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out dataPathOutput
	if err := RunNode(ctx, NodeOptions{Name: dataPathNodeMain}, in, &out); err != nil {
		t.Fatalf("datapath node: %v", err)
	}
	if len(out.Rounds) != in.Rounds {
		t.Fatalf("%d rounds, want %d", len(out.Rounds), in.Rounds)
	}
	var ticks uint64
	for r, res := range out.Rounds {
		if len(res.Service) != len(svcs) || len(res.Direct) != len(svcs) {
			t.Fatalf("round %d: %d service and %d direct runs, want %d each", r, len(res.Service), len(res.Direct), len(svcs))
		}
		for j, s := range svcs {
			sv, dr := res.Service[j], res.Direct[j]
			valid := map[netip.AddrPort]bool{}
			for _, ep := range s.Endpoints {
				valid[netip.AddrPortFrom(ep, s.TargetPort)] = true
			}
			if sv.Sent != in.Count || sv.OK != in.Count || dr.Sent != in.Count || dr.OK != in.Count {
				t.Errorf("round %d %s: service %d/%d, direct %d/%d answered, want %d each; failures %v %v",
					r, s.ClusterIP, sv.OK, sv.Sent, dr.OK, dr.Sent, in.Count, sv.FailureSample, dr.FailureSample)
			}
			for ep := range sv.Endpoints {
				if !valid[ep] {
					t.Errorf("round %d %s: answered by %s, not an endpoint of the service", r, s.ClusterIP, ep)
				}
			}
			wantDirect := netip.AddrPortFrom(s.Endpoints[r%2], s.TargetPort)
			if dr.Endpoints[wantDirect] != in.Count {
				t.Errorf("round %d %s: direct connections answered by %v, want all by %s", r, s.ClusterIP, dr.Endpoints, wantDirect)
			}
			if sv.First == dr.First || sv.First != ((r+j)%2 == 0) {
				t.Errorf("round %d target %d: service first %v, direct first %v: want them to alternate with round and target", r, j, sv.First, dr.First)
			}
			if sv.Seconds <= 0 || dr.Seconds <= 0 || sv.ProcessSeconds <= 0 || dr.ProcessSeconds <= 0 || sv.Windows != 1 {
				t.Errorf("round %d %s: service %+v, direct %+v: want wall and CPU time, one window", r, s.ClusterIP, sv, dr)
			}
			ticks += sv.CPU.Total() + dr.CPU.Total()
		}
		if res.CPU < 0 || res.WindowMax <= 0 {
			t.Errorf("round %d: cpu %d, window max %d", r, res.CPU, res.WindowMax)
		}
	}
	if ticks == 0 {
		t.Error("the pinned CPU's /proc/stat line did not move")
	}
	if fmt.Sprint(out.CPUsBefore) != fmt.Sprint(out.CPUsAfter) && len(out.CPUsAfter) != 1 {
		t.Errorf("dataplane threads by allowed CPUs: before %v, after %v: want them unpinned", out.CPUsBefore, out.CPUsAfter)
	}
	pinned := strconv.Itoa(out.Rounds[0].CPU)
	for cpus := range out.CPUsAfter {
		if cpus == pinned && len(out.CPUsBefore) == 1 && out.CPUsBefore[pinned] == 0 {
			t.Errorf("dataplane threads still pinned to cpu %s after the rounds: %v", pinned, out.CPUsAfter)
		}
	}
	b, _ := json.Marshal(out.Rounds[0].Service[0])
	t.Logf("round 0, first Service: %s", b)
}
