package node

import (
	"os"
	"slices"
	"strconv"
	"strings"
)

// process is one process found under /proc.
type process struct {
	pid, ppid int
	comm      string
}

// processes lists every process /proc shows (this kernel has no
// /proc/PID/task/TID/children, so children are found by their parent).
func processes() []process {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // exited meanwhile
		}
		if p, ok := parseStat(pid, string(b)); ok {
			out = append(out, p)
		}
	}
	return out
}

// parseStat reads pid, comm and ppid from /proc/PID/stat: "pid (comm) state
// ppid ...", where comm may hold spaces and parentheses.
func parseStat(pid int, stat string) (process, bool) {
	open, close := strings.IndexByte(stat, '('), strings.LastIndexByte(stat, ')')
	if open < 0 || close < open {
		return process{}, false
	}
	f := strings.Fields(stat[close+1:])
	if len(f) < 2 {
		return process{}, false
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return process{}, false
	}
	return process{pid: pid, ppid: ppid, comm: stat[open+1 : close]}, true
}

// descendants are the processes below pid, parents before children.
func descendants(pid int) []process {
	return below(processes(), pid)
}

func below(all []process, pid int) []process {
	var out []process
	parents := map[int]bool{pid: true}
	for grew := true; grew; {
		grew = false
		for _, p := range all {
			if parents[p.ppid] && !parents[p.pid] {
				parents[p.pid] = true
				out = append(out, p)
				grew = true
			}
		}
	}
	return out
}

// ruleWriters are the command names (as /proc shows them, cut to 15
// bytes) of the programs that write rules.
var ruleWriters = []string{"iptables-restor", "ip6tables-resto", "iptables-nft-re", "nft", "ipset"}

// isRuleWriter says whether comm names a program that writes rules.
func isRuleWriter(comm string) bool { return slices.Contains(ruleWriters, comm) }
