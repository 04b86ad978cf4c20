package main

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// mark starts the comment that says which upstream API the code under it
// uses, as in proxier/upstream.go:
//
//	// upstream API: nftables.NewProxier's signature (v1.37: ...)
const mark = "// upstream API:"

// compilerError is a go build error line: file:line:col: message.
var compilerError = regexp.MustCompile(`^(\S+\.go):(\d+):(?:\d+:)? (.+)$`)

// explain turns the output of a failed go build into a sentence per
// changed upstream API. Each compiler error in a file of this module is
// looked up in that file: the mark in the lines just above it (the same
// block, up to a blank line) names the API. An error without a mark is
// listed as is; errors in other modules mean the build failed before
// kpsim's code.
func explain(output, against string, readFile func(string) ([]byte, error)) string {
	var changed []string           // what each mark names, in order
	where := map[string][]string{} // mark -> the errors under it
	var unmarked []string
	for _, line := range strings.Split(output, "\n") {
		m := compilerError.FindStringSubmatch(line)
		if m == nil || filepath.IsAbs(m[1]) || strings.HasPrefix(m[1], "..") {
			continue // not an error, or one outside this module
		}
		n, _ := strconv.Atoi(m[2])
		src, err := readFile(m[1])
		api := ""
		if err == nil {
			api = markAbove(string(src), n)
		}
		if api == "" {
			unmarked = append(unmarked, line)
			continue
		}
		if where[api] == nil {
			changed = append(changed, api)
		}
		where[api] = append(where[api], line)
	}

	var b strings.Builder
	if len(changed) == 0 && len(unmarked) == 0 {
		fmt.Fprintf(&b, "kpsim's adapters were not reached: the build against %s failed before kpsim's own code (see go's errors above).\n", against)
		return b.String()
	}
	fmt.Fprintf(&b, "kpsim's adapters do not build against %s: upstream changed\n", against)
	for _, api := range changed {
		fmt.Fprintf(&b, "  - %s\n", api)
		for _, e := range where[api] {
			fmt.Fprintf(&b, "      %s\n", e)
		}
	}
	if len(unmarked) > 0 {
		fmt.Fprintf(&b, "  - an API kpsim uses outside its per-release code (no %q mark there):\n", mark)
		for _, e := range unmarked {
			fmt.Fprintf(&b, "      %s\n", e)
		}
	}
	b.WriteString("kpsim's per-release code is proxier/upstream.go (v1.37 on) and proxier/upstream_v1_36.go (tag kube_1_36);\n" +
		"a release whose API differs from both needs a file of its own, with a build tag cmd/kpsim-variant sets for it.\n")
	return b.String()
}

// markAbove returns what the mark nearest above line n (1-based) of src
// names, searching the block of non-blank lines that holds line n.
func markAbove(src string, n int) string {
	lines := strings.Split(src, "\n")
	for i := min(n, len(lines)) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l == "" {
			break
		}
		if api, ok := strings.CutPrefix(l, mark); ok {
			return strings.TrimSpace(api)
		}
	}
	return ""
}
