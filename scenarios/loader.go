package scenarios

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// LoadFile reads, decodes, defaults and validates one scenario file. On
// failure the error is an ErrorList naming file:line and field path for
// every problem found.
func LoadFile(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading scenario: %w", err)
	}
	return Load(path, data)
}

// Load decodes, defaults and validates a scenario held in data; file names
// it in errors.
func Load(file string, data []byte) (*Scenario, error) {
	s, lines, errs := decode(file, data)
	if len(errs) > 0 {
		errs.sort()
		return nil, errs
	}
	s.File = file
	Default(s)
	if verrs := validate(s); len(verrs) > 0 {
		errs = lines.locate(file, verrs)
		errs.sort()
		return nil, errs
	}
	return s, nil
}

// decode parses data strictly: YAML syntax, a single document, no unknown
// fields anywhere (checked against the Go types, with a suggestion for
// near misses) and values of the right type.
func decode(file string, data []byte) (*Scenario, lineIndex, ErrorList) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil, ErrorList{{File: file, Line: 1, Detail: "file is empty: want a Scenario (apiVersion " + APIVersion + ")"}}
		}
		return nil, nil, ErrorList{syntaxError(file, err, data)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, nil, ErrorList{{File: file, Line: extra.Line, Detail: "a scenario file holds one document; found another after ---"}}
	} else if !errors.Is(err, io.EOF) {
		return nil, nil, ErrorList{syntaxError(file, err, data)}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return nil, nil, ErrorList{{File: file, Line: root.Line, Detail: "a scenario must be a mapping with apiVersion, kind, metadata and spec; found " + describe(root)}}
	}

	lines := lineIndex{}
	var errs ErrorList
	walkKnown(file, root, reflect.TypeOf(Scenario{}), nil, lines, &errs)

	s := &Scenario{}
	if err := root.Decode(s); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			errs = append(errs, &Error{File: file, Detail: err.Error()})
		} else {
			for _, msg := range te.Errors {
				errs = append(errs, lines.typeError(file, msg))
			}
		}
	}
	if len(errs) > 0 {
		return nil, nil, errs
	}
	return s, lines, nil
}

var lineRE = regexp.MustCompile(`^(?:yaml: )?line (\d+): `)

func syntaxError(file string, err error, data []byte) *Error {
	msg := err.Error()
	// yaml.v3 gives no line for errors found at the end of the input
	// ("found unexpected end of stream"): that is the last line.
	line := max(1, bytes.Count(bytes.TrimRight(data, "\n"), []byte("\n"))+1)
	if m := lineRE.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = msg[len(m[0]):]
	}
	return &Error{File: file, Line: line, Detail: "invalid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
}

var unmarshalerType = reflect.TypeOf((*yaml.Unmarshaler)(nil)).Elem()

// walkKnown records the line of every field path and reports every
// mapping key that names no field of the Go type it decodes into.
// yaml.v3 can do the latter only through a Decoder over raw bytes, and
// then without field paths; walking the node tree gives both.
func walkKnown(file string, n *yaml.Node, t reflect.Type, path *field.Path, lines lineIndex, errs *ErrorList) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if path != nil {
		lines.record(path.String(), n.Line)
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		// It decodes and checks itself; still record where its parts
		// are, so validation errors inside a literal manifest get lines.
		recordAll(n, path, lines)
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return // the decoder reports the type mismatch
		}
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			f, ok := fields[k.Value]
			child := field.NewPath(k.Value)
			if path != nil {
				child = path.Child(k.Value)
			}
			if !ok {
				*errs = append(*errs, &Error{File: file, Line: k.Line, Field: child.String(), Detail: unknownField(k.Value, fields)})
				continue
			}
			lines.record(child.String(), k.Line)
			walkKnown(file, v, f.Type, child, lines, errs)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return
		}
		for i, item := range n.Content {
			walkKnown(file, item, t.Elem(), path.Index(i), lines, errs)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			walkKnown(file, n.Content[i+1], t.Elem(), path.Key(n.Content[i].Value), lines, errs)
		}
	}
}

// recordAll records the line of every path below n.
func recordAll(n *yaml.Node, path *field.Path, lines lineIndex) {
	if path == nil {
		return
	}
	lines.record(path.String(), n.Line)
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			lines.record(path.Child(k.Value).String(), k.Line)
			recordAll(n.Content[i+1], path.Child(k.Value), lines)
		}
	case yaml.SequenceNode:
		for i, item := range n.Content {
			recordAll(item, path.Index(i), lines)
		}
	}
}

// yamlFields maps the YAML names of a struct's decoded fields to them.
func yamlFields(t reflect.Type) map[string]reflect.StructField {
	fields := map[string]reflect.StructField{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		fields[name] = f
	}
	return fields
}

// unknownField explains an unknown key and suggests the field it most
// likely meant.
func unknownField(key string, fields map[string]reflect.StructField) string {
	best, bestDist := "", 3
	for name := range fields {
		d := editDistance(strings.ToLower(key), strings.ToLower(name))
		if d < bestDist || (d == bestDist && name < best) {
			best, bestDist = name, d
		}
	}
	if best != "" {
		return fmt.Sprintf("unknown field %q (did you mean %q?)", key, best)
	}
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	sort.Strings(names)
	return fmt.Sprintf("unknown field %q; known fields: %s", key, strings.Join(names, ", "))
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// lineIndex maps field paths to the line they start on, and lines back to
// the deepest field path that starts there.
type lineIndex map[string]int

func (l lineIndex) record(path string, line int) {
	if _, ok := l[path]; !ok {
		l[path] = line
	}
}

// lineOf returns the line of path, or of its nearest recorded ancestor
// (a missing required field is reported where its parent is).
func (l lineIndex) lineOf(path string) int {
	for p := path; p != ""; {
		if line, ok := l[p]; ok {
			return line
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return 0
}

// pathAt returns the longest recorded path that starts on line.
func (l lineIndex) pathAt(line int) string {
	best := ""
	for p, ln := range l {
		if ln == line && (len(p) > len(best) || (len(p) == len(best) && p < best)) {
			best = p
		}
	}
	return best
}

var unmarshalRE = regexp.MustCompile("(?s)^cannot unmarshal !!(\\w+)(?: (`.*`))? into (.+)$")

// goTypeWord names a Go type the way a scenario author thinks of it.
func goTypeWord(t string) string {
	switch {
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map["):
		return "a mapping"
	case strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint"):
		return "an integer"
	case strings.HasPrefix(t, "float"):
		return "a number"
	case t == "bool":
		return "true or false"
	case t == "string" || strings.HasPrefix(t, "v1."):
		return "a string"
	}
	return "a mapping"
}

var decodeMsgRE = regexp.MustCompile(`(?s)^line (\d+): (.*)$`)

// typeError turns one yaml.v3 decode message into a located Error.
func (l lineIndex) typeError(file, msg string) *Error {
	m := decodeMsgRE.FindStringSubmatch(msg)
	if m == nil {
		return &Error{File: file, Detail: msg}
	}
	line, _ := strconv.Atoi(m[1])
	detail := m[2]
	if u := unmarshalRE.FindStringSubmatch(detail); u != nil {
		// yaml.v3 speaks of YAML tags and Go types; say it in the file's terms.
		got := map[string]string{"seq": "a list", "map": "a mapping", "null": "null", "str": "the string", "int": "the integer", "float": "the number", "bool": "the boolean"}[u[1]]
		if got == "" {
			got = "!!" + u[1]
		}
		if u[2] != "" {
			got += " " + u[2]
		}
		detail = fmt.Sprintf("want %s, got %s", goTypeWord(u[3]), got)
	}
	return &Error{File: file, Line: line, Field: l.pathAt(line), Detail: detail}
}

// locate turns validation errors into located Errors.
func (l lineIndex) locate(file string, verrs field.ErrorList) ErrorList {
	errs := make(ErrorList, 0, len(verrs))
	for _, e := range verrs {
		errs = append(errs, &Error{File: file, Line: l.lineOf(e.Field), Field: e.Field, Detail: e.ErrorBody()})
	}
	return errs
}
