package rules

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
)

// Dump is a dataplane read by ReadIPTables, ReadNFTables or ReadIPVS.
type Dump interface {
	// Counts are the flat counts under the scenario schema's names.
	Counts() map[string]int
	// Normalize is a canonical text of the kube-proxy state, equal for two
	// dataplanes that behave the same (see DiffNormalized).
	Normalize() string
	// Learned lists, sorted, the state in the dump that packets wrote and
	// the proxier did not, which Normalize leaves out (see learned.go).
	Learned() []string
	// files are the raw outputs and their file name suffixes.
	files() []dumpFile
}

type dumpFile struct {
	suffix string
	data   []byte
}

func (d *IPTablesDump) files() []dumpFile {
	return []dumpFile{
		{".iptables-save.gz", d.IPv4},
		{".ip6tables-save.gz", d.IPv6},
		{".iptables.normalized.gz", []byte(d.Normalize())},
	}
}

func (d *NFTablesDump) files() []dumpFile {
	return []dumpFile{
		{".nft.gz", d.Text},
		{".nft.json.gz", d.JSON},
		{".nft.normalized.gz", []byte(d.Normalize())},
		{".nft.learned.gz", learnedText(d.Learned())},
	}
}

var (
	_ Dump = (*IPTablesDump)(nil)
	_ Dump = (*NFTablesDump)(nil)
)

// SaveDumps writes the raw outputs of dumps into dir, gzip-compressed, so
// a user can re-derive every count with zcat and grep:
//
//	<name>.iptables-save.gz   iptables-<backend>-save (zcat | grep -c '^-A')
//	<name>.ip6tables-save.gz  ip6tables-<backend>-save
//	<name>.nft.gz             nft list ruleset
//	<name>.nft.json.gz        nft -j list ruleset
//
// and next to them the normalized forms (<name>.iptables.normalized.gz,
// <name>.nft.normalized.gz), the state learned from traffic that these
// leave out (<name>.nft.learned.gz, one Learned line each, empty when
// there is none; IPVSDump adds <name>.ipvs.learned.gz; read them back with
// ParseLearned) and <name>.counts.json, the merged Counts of all dumps.
// dir is created if missing.
func SaveDumps(dir, name string, dumps ...Dump) error {
	if name == "" || name != filepath.Base(name) || strings.HasPrefix(name, ".") {
		return fmt.Errorf("save dumps: bad name %q: want a plain file name prefix", name)
	}
	if len(dumps) == 0 {
		return errors.New("save dumps: no dumps")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("save dumps: %w", err)
	}
	counts := map[string]int{}
	for _, d := range dumps {
		if d == nil || reflect.ValueOf(d).IsNil() {
			return errors.New("save dumps: nil dump")
		}
		for _, f := range d.files() {
			if err := writeGzip(filepath.Join(dir, name+f.suffix), f.data); err != nil {
				return fmt.Errorf("save dumps: %w", err)
			}
		}
		for k, v := range d.Counts() {
			counts[k] = v
		}
	}
	b, err := json.MarshalIndent(counts, "", "  ")
	if err != nil {
		return fmt.Errorf("save dumps: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".counts.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("save dumps: %w", err)
	}
	return nil
}

func writeGzip(path string, data []byte) error {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Name = strings.TrimSuffix(filepath.Base(path), ".gz")
	if _, err := zw.Write(data); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// DiffNormalized compares two normalized dumps and returns a readable
// difference, or "" when they are equal: "- line" for each line only in
// a, "+ line" for each only in b (by count, so a duplicated rule shows),
// at most maxDiffLines of them. When both hold the same lines in another
// order (order matters: probability cascades), it names the first line
// where they part.
func DiffNormalized(a, b string) string {
	if a == b {
		return ""
	}
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	count := map[string]int{}
	for _, l := range al {
		count[l]++
	}
	for _, l := range bl {
		count[l]--
	}
	var out []string
	more := 0
	emit := func(sign string, lines []string) {
		for _, l := range lines {
			n := count[l]
			if (sign == "-" && n > 0) || (sign == "+" && n < 0) {
				if sign == "-" {
					count[l]--
				} else {
					count[l]++
				}
				if len(out) < maxDiffLines {
					out = append(out, sign+" "+l)
				} else {
					more++
				}
			}
		}
	}
	emit("-", al)
	emit("+", bl)
	if len(out) == 0 {
		for i := range min(len(al), len(bl)) {
			if al[i] != bl[i] {
				return fmt.Sprintf("same lines in another order; first difference at line %d:\n- %s\n+ %s", i+1, al[i], bl[i])
			}
		}
	}
	if more > 0 {
		out = append(out, fmt.Sprintf("... and %d more lines", more))
	}
	return strings.Join(out, "\n")
}

// maxDiffLines bounds DiffNormalized's output.
const maxDiffLines = 200
